"""Option bases every method's options dataclass derives from: `MethodOptions` (layer choice, seed, progress,
checkpoint) and `TrainingOptions` (the distillation loop's budget); `open_run`, the opening every method's run
shares before any work, so a bad input fails the same way in every method."""

from __future__ import annotations

import dataclasses
import numbers
import os
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple, Union

import torch
from torch import nn

from .calibration import Calibration
from .masks import Sparsity, check_target, prunable_layers

AMP_CHOICES = (None, "bf16")  # training precision of the forwards: float32, or bfloat16 under torch.autocast
FilterFn = Callable[[nn.Module, str], bool]


class OptionTypeError(TypeError, ValueError):
    """An option value of the wrong type: a TypeError to a library caller, a ValueError to a grid."""


@dataclass
class MethodOptions:
    # Defaults that changed, each with the value records made before the change ran with: a record that lacks the
    # option gets that value when it is re-run (tasks/grid/rerun.py), not today's default.
    DEFAULTS_BEFORE: ClassVar[dict[str, Any]] = {}

    exclude: list[str] = field(default_factory=list)  # layer names kept dense (one name may be given as a str)
    filter_fn: FilterFn | None = None  # filter_fn(module, name) -> prune this Conv2d/Linear? (torchao's convention)
    seed: int = 0
    device: str | None = None  # None: the model's device
    progress: bool = True
    checkpoint: str | None = None  # path: resume from it and save to it
    checkpoint_every_s: float = 180.0
    checkpoint_every_steps: int | None = 100  # also save every this many steps (None: by time only)

    def __post_init__(self) -> None:
        # "fc" is one layer's name, not the letters 'f' and 'c'
        names = [self.exclude] if isinstance(self.exclude, str) else list(self.exclude or [])
        wrong = [n for n in names if not isinstance(n, str)]
        if wrong:
            raise TypeError(f"exclude takes layer names (str), e.g. exclude=['fc']; got {wrong!r}")
        self.exclude = names

    def layers(self, model: nn.Module) -> dict[str, nn.Module]:
        """The layers this run prunes, by qualified name."""
        return prunable_layers(model, self.exclude, self.filter_fn)

    def place(self, model: nn.Module) -> torch.device:
        """The device this run computes on (`device`, else the model's), with the model moved there."""
        device = resolve_device(self.device, model)
        model.to(device)
        return device

    def validate(self) -> None:
        """Raise a clear error for a value the method cannot use: every option's type, then its range."""
        self.check_types()
        check_at_least(self, "checkpoint_every_s", 0.0)  # 0: at every step
        check_at_least(self, "checkpoint_every_steps", 1)

    def check_types(self) -> None:
        """Every option of the type its field declares (a Literal's choices included)."""
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not _fits(value, hints[f.name]):
                raise OptionTypeError(
                    f"option {f.name}={value!r} of {type(self).__name__} must be {_describe(hints[f.name])}"
                )

    def target_tolerance(self) -> float:
        """How far from the target this method may land: 0 (to one weight) for a method with an exact step."""
        return 0.0

    def fit_budget(self, n_images: int) -> None:
        """Set the budget options left at None to what `n_images` calibration images call for (here none)."""

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    @classmethod
    def effective(cls, values: dict[str, Any], target: float) -> dict[str, Any]:
        """`values` (a `to_dict`) with any target-dependent default resolved for `target` (here none)."""
        return values

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: a filter function is recorded by its qualified name."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if callable(value):
                value = getattr(value, "__qualname__", repr(value))
            out[f.name] = value
        return out


@dataclass
class TrainingOptions(MethodOptions):
    """The budget and optimiser every distillation-loop method shares (FCPTS's released defaults)."""

    # None: EPOCHS passes over the calibration set, at most PAPER_ITERATIONS (fit_budget)
    iterations: int | None = None
    batch_size: int = 64
    lr: float | None = None  # None: the released code's 0.04 x batch / 256
    momentum: float = 0.9
    weight_decay: float = 3e-4
    warmup_iterations: int | None = None  # None: one epoch over the calibration set
    temperature: float = 4.0  # KL temperature
    teacher_mode: str = "train"
    amp: str | None = None  # "bf16": student and teacher forwards under torch.autocast (masks, optimiser: fp32)
    log_every: int = 50  # steps between moving losses to the host (and checking them for NaN/Inf)
    calibration_workers: int | None = None  # processes making batches ahead; None: min(8, CPUs) on GPU, 0 on CPU

    EPOCHS: ClassVar[int] = 100
    PAPER_ITERATIONS: ClassVar[int] = 1600

    def fit_budget(self, n_images: int) -> None:
        if self.iterations is None:
            self.iterations = epochs_budget(n_images, self.batch_size, self.EPOCHS, self.PAPER_ITERATIONS)

    def resolved_lr(self, batch_size: int) -> float:
        return self.lr if self.lr is not None else 0.04 * batch_size / 256

    def validate(self) -> None:
        super().validate()
        check_at_least(self, "iterations", 0)  # None: fitted to the calibration set (fit_budget)
        check_at_least(self, "batch_size", 1)
        check_at_least(self, "lr", 0.0, inclusive=False)
        check_at_least(self, "temperature", 0.0, inclusive=False)
        check_at_least(self, "momentum", 0.0)
        check_at_least(self, "weight_decay", 0.0)
        check_at_least(self, "warmup_iterations", 0)
        check_choice(self, "teacher_mode", ("train", "eval"))
        if self.amp not in AMP_CHOICES:
            raise ValueError(
                f"option amp={self.amp!r} is not one of {AMP_CHOICES}: None trains in float32, 'bf16' runs the "
                "forwards in bfloat16 under torch.autocast (float16 would need loss scaling and is not offered)"
            )
        check_at_least(self, "calibration_workers", 0)
        check_at_least(self, "log_every", 1)


def fitted_iterations(iterations: int | None) -> int:
    """An `iterations` option as the int it is once `fit_budget` has run."""
    if iterations is None:
        raise TypeError("iterations is None: options.fit_budget(n_images) must run before training")
    return iterations


def epochs_budget(n_images: int, batch_size: int, epochs: int, most: int) -> int:
    """Steps of `epochs` passes over `n_images` in batches of `batch_size`, at most `most` (the paper's budget)."""
    return max(1, min(most, epochs * (n_images // min(batch_size, max(n_images, 1)))))


def resolve_device(device: str | torch.device | None, model: nn.Module | None = None) -> torch.device:
    """`device`, else the model's first parameter's (CPU without one); CUDA asked for where there is none: an error."""
    if device is None:
        first = next(model.parameters(), None) if model is not None else None
        return first.device if first is not None else torch.device("cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"unknown device {str(device)!r} ({e})") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} asked for, but CUDA is not available here; use device='cpu'")
    return resolved


def check_choice(options: object, name: str, allowed: tuple[str, ...]) -> None:
    if getattr(options, name) not in allowed:
        raise ValueError(f"option {name}={getattr(options, name)!r} is not one of {allowed}")


def check_at_least(options: MethodOptions, name: str, bound: float, inclusive: bool = True) -> None:
    """`options.name` >= bound (> bound when not inclusive); None passes (it means "the default")."""
    value = getattr(options, name)
    if value is not None and not (value >= bound if inclusive else value > bound):
        raise ValueError(f"option {name} must be {'>=' if inclusive else '>'} {bound:g}, got {value!r}")


def check_choose_for(value: dict | None, keys: tuple[str, ...]) -> None:
    """A method's `choose_for` is None or a dict of exactly `keys`, each a positive integer."""
    if value is not None and not (
        isinstance(value, dict)
        and set(value) == set(keys)
        and all(isinstance(v, int) and v >= 1 for v in value.values())
    ):
        wanted = ", ".join(f"{key!r}: N" for key in keys)
        raise ValueError(f"choose_for must be None or {{{wanted}}} with positive integers, got {value!r}")


def _fits(value: Any, hint: Any) -> bool:
    """Whether `value` has the declared type (numbers, flags, named choices, None; anything else passes)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, arm) for arm in args)
    if origin is Literal:
        return value in args
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, (str, os.PathLike, torch.device))
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        element_hints = [a for a in args if a is not Ellipsis]
        return all(any(_fits(v, h) for h in element_hints) for v in value) if element_hints else True
    return True


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):  # named choices first: "'auto' or a number"
        return " or ".join(_describe(a) for a in sorted(args, key=lambda a: typing.get_origin(a) is not Literal))
    if origin is Literal:
        return repr(args[0]) if len(args) == 1 else "one of " + ", ".join(repr(a) for a in args)
    if hint is type(None):
        return "None"
    if hint is float:
        return "a number"
    if hint is int:
        return "a whole number"
    return getattr(hint, "__name__", str(hint))


class RunSetup(NamedTuple):
    target: Sparsity
    device: torch.device  # where the model now is and the run computes
    layers: dict[str, nn.Module]  # the layers the run prunes, by qualified name
    calib: Calibration | None  # None for a method that reads no calibration data

    def required_calib(self) -> Calibration:
        """The calibration batches of a method that reads them: open_run was given calibration data."""
        if self.calib is None:
            raise ValueError("this method reads calibration data, and calibration is None: pass the images")
        return self.calib


def open_run(model: nn.Module, calibration: Any, target: float, options: MethodOptions) -> RunSetup:
    """Check `target` and `options`, place `model`, choose its layers, seed its calibration batches (unless None)
    and fit the budget options left at None to them."""
    target = check_target(target)
    options.validate()
    device = options.place(model)
    layers = options.layers(model)
    calib = None if calibration is None else Calibration(calibration, options.batch_size, options.seed)  # type: ignore[attr-defined]
    if calib is not None:
        options.fit_budget(len(calib))
    return RunSetup(target, device, layers, calib)
