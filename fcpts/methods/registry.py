"""One registry of sparsification methods: a typed record per method, read everywhere a method is named.

    method = get_method("pot-erk")
    sparse, report = method(model, calibration, 0.9, iterations=500)

Every record has the same call: (model, calibration, target, options) -> (sparse model, SparsityReport).
Calling the record (not its `run`) checks the inputs first, whatever the method: the target (any real number in
[0, 1)), the options (an object of the method's own options class, keyword options, or both when they set
different things), finite weights, the calibration data (a tensor, a Dataset or a DataLoader); and it adapts a
model whose output is not one tensor (fcpts/core/outputs.py).
Its label and plot style are the only ones tables, figures and command lines use. A method registers itself
in its own module (`register(Method(...))`); `fcpts.methods` imports every module of the package.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from fcpts.core.calibration import calibration_data
from fcpts.core.masks import check_finite_weights, check_target
from fcpts.core.options import MethodOptions
from fcpts.core.outputs import OutputFn, tensor_outputs
from fcpts.core.report import SparsityReport


class UnknownOptionError(TypeError, ValueError):
    """An option the method does not have: a TypeError to a library caller, a ValueError to a grid."""


RunFn = Callable[[nn.Module, Any, float, Any], "tuple[nn.Module, SparsityReport]"]
# What a grid grants every method alike; training-loop methods also take the iteration budget.
SHARED_BUDGET = ("seed", "progress", "checkpoint")
TRAINING_BUDGET = ("iterations", "batch_size")


@dataclass(frozen=True)
class Method:
    name: str
    label: str  # how tables, figures and logs name it
    run: RunFn
    options: type[MethodOptions]
    trains: bool = False  # runs the distillation loop (tasks give it augmented calibration data)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # options this entry pins (e.g. allocation="erk")
    in_paper: bool = True  # False: an extra beside the paper's methods, labelled so in tables
    style: tuple[str, str] = ("tab:gray", "x")  # matplotlib colour and marker
    summary: str = ""

    def check_overrides(self, overrides: Mapping[str, Any] | None) -> None:
        """A clear error, before any work, for an option the method does not have or that it pins."""
        known = self.options.field_names() - set(self.fixed)
        unknown = sorted(set(overrides or {}) - known)
        if unknown:
            raise UnknownOptionError(
                f"method {self.name!r} has no option {', '.join(unknown)}; its options: "
                f"{', '.join(sorted(known)) or 'none'}"
            )

    def make_options(
        self, budget: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None
    ) -> MethodOptions:
        """Options from a grid's budget (only what this method takes), overrides, then the pinned values."""
        self.check_overrides(overrides)
        granted = SHARED_BUDGET + (TRAINING_BUDGET if self.trains else ())
        values = {k: v for k, v in (budget or {}).items() if k in granted}
        return self.options.from_kwargs(**{**values, **(overrides or {}), **self.fixed})

    def resolve_options(self, options: MethodOptions | None, overrides: Mapping[str, Any]) -> MethodOptions:
        """The options a call runs with: keyword options alone, or an options object with keyword options merged
        into a copy of it (the object itself is left alone). A keyword option that the object already sets to
        something else, or an object of another method's options class, is a TypeError."""
        if options is None:
            return self.make_options(overrides=overrides)
        if type(options) is not self.options:
            raise TypeError(
                f"method {self.name!r} takes {self.options.__name__} options, got {type(options).__name__}; "
                f"build them with fcpts.get_method({self.name!r}).options(...) or pass keyword options"
            )
        self.check_overrides(overrides)
        default, given = (
            self.options(),
            self.options(**overrides),
        )  # `given`: the keyword values as stored ("fc": ["fc"])
        clash = sorted(k for k in overrides if getattr(options, k) not in (getattr(default, k), getattr(given, k)))
        if clash:
            raise TypeError(
                f"{', '.join(clash)} set both in the options object and as a keyword option, to different values; "
                "set each in one place"
            )
        merged = dataclasses.replace(options, **overrides, **self.fixed)
        merged.validate()
        return merged

    def __call__(
        self,
        model: nn.Module,
        calibration: Any,
        target: Any,
        options: MethodOptions | None = None,
        *,
        output_fn: OutputFn | None = None,
        **overrides: Any,
    ) -> tuple[nn.Module, SparsityReport]:
        """Sparsify `model` in place; every input is checked before any work. `output_fn(output)` picks the
        tensor to distil from a model that returns more than one (default: fcpts.core.outputs.default_output)."""
        target = check_target(target)
        options = self.resolve_options(options, overrides)
        check_finite_weights(model)
        options.layers(model)  # exclude / filter_fn / a model without layers: a clear error now
        calibration = calibration_data(calibration)
        with tensor_outputs(model, output_fn):
            return self.run(model, calibration, target, options)


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is registered twice")
    METHODS[method.name] = method
    return method


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; available: {', '.join(sorted(METHODS))}")
    return METHODS[name]


def training_methods() -> list[str]:
    """The methods that run a distillation loop (FCPTS, its fixed-rate ablation, STR, ProbMask)."""
    return [name for name, m in METHODS.items() if m.trains]


def label(name: str) -> str:
    """The display label of a method; an unregistered name (an old record) shows as itself."""
    return METHODS[name].label if name in METHODS else name
