"""One registry of sparsification methods: a typed record per method, read everywhere a method is named. Every
record has the same call, `get_method("pot-erk")(model, calibration, 0.9, iterations=500)` -> (sparse model,
SparsityReport), which checks the inputs first, whatever the method; its label, style, role and needs are the only
ones tables, figures and command lines use. A method registers itself in its own module; other method packages
(`baselines/`, any `fcpts.methods` entry point) are imported the first time the registry is read."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import torch
from torch import nn

from fcpts.core.calibration import calibration_data, check_input_dtype, check_inputs_fit
from fcpts.core.masks import (
    check_finite_result,
    check_finite_weights,
    check_stored_weights,
    check_target,
    check_weight_dtype,
    check_weight_used_as_stored,
    check_zeros_within_target,
    describe_unprunable,
    layer_weight,
    unprunable_weights,
)
from fcpts.core.options import MethodOptions, TrainingOptions
from fcpts.core.report import SparsityReport

log = logging.getLogger("fcpts")


class UnknownOptionError(TypeError, ValueError):
    """An option the method does not have: a TypeError to a library caller, a ValueError to a grid."""


# picks the tensor of logits the methods distil from a model's output
OutputFn = Callable[[Any], torch.Tensor]
LOGIT_KEYS = ("logits", "out")
RunFn = Callable[[nn.Module, Any, float, Any], "tuple[nn.Module, SparsityReport]"]
# What a grid grants every method alike; training-loop methods also take the iteration budget.
SHARED_BUDGET = ("seed", "progress", "checkpoint")
TRAINING_BUDGET = ("iterations", "batch_size")


# What a method is to the paper. Tables show the paper's rows for the first two (their layout comes from the
# paper's reference numbers) and add rows, labelled "not in the paper", for the third.
PAPER_METHOD = "paper-method"  # FCPTS and its ablation
PAPER_BASELINE = "paper-baseline"  # a method the paper compares with
NOT_IN_PAPER = "not-in-paper"  # beyond the paper: another comparison, or this suite's own variant
ROLES = (PAPER_BASELINE, PAPER_METHOD, NOT_IN_PAPER)  # registry order (see `list_methods`)
# What a method may need of a model beyond Conv2d/Linear layers (a task says which its models have).
FEATURES = ("batchnorm",)
STUDIED_FAMILY = "fcpts"  # the paper's method: its variants follow the comparisons in registry order
# Method packages beyond `fcpts.methods`, imported on the first read of the registry: those installed under
# this entry-point group, and these by name (a checkout run with PYTHONPATH=. and no install has no entry points).
ENTRY_POINT_GROUP = "fcpts.methods"
DEFAULT_PACKAGES = ("baselines",)


@dataclass(frozen=True)
class Method:
    name: str
    label: str  # how tables, figures and logs name it
    run: RunFn
    options: type[MethodOptions]
    fixed: Mapping[str, Any] = field(default_factory=dict)  # options this entry pins (e.g. allocation="erk")
    role: str = NOT_IN_PAPER  # one of ROLES
    requires: tuple[str, ...] = ()  # FEATURES the model must have (e.g. "batchnorm": it re-estimates BN statistics)
    ablation: bool = False  # a variant that takes another method apart (an allocation alone): no grid runs it unasked
    family: str = ""  # methods sharing one budget and option flags (e.g. "pot"); default: the name
    style: tuple[str, str] = ("tab:gray", "x")  # matplotlib colour and marker
    summary: str = ""
    headline: bool = False  # a column of the README's results summary

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"method {self.name!r}: role {self.role!r} is not one of {', '.join(ROLES)}")
        unknown = sorted(set(self.requires) - set(FEATURES))
        if unknown:
            raise ValueError(
                f"method {self.name!r}: unknown feature {', '.join(unknown)}; features: {', '.join(FEATURES)}"
            )
        if not self.family:
            object.__setattr__(self, "family", self.name)

    @property
    def in_paper(self) -> bool:
        """False: an extra beside the paper's methods, labelled so in tables and figures."""
        return self.role != NOT_IN_PAPER

    def check_overrides(self, overrides: Mapping[str, Any] | None) -> None:
        """A clear error, before any work, for an option the method does not have or that it pins."""
        known = self.options.field_names() - set(self.fixed)
        unknown = sorted(set(overrides or {}) - known)
        if unknown:
            raise UnknownOptionError(
                f"method {self.name!r} has no option {', '.join(unknown)}; its options: "
                f"{', '.join(sorted(known)) or 'none'}"
            )

    @property
    def trains(self) -> bool:
        """Runs the distillation loop (its options are TrainingOptions): tasks give it augmented calibration data."""
        return issubclass(self.options, TrainingOptions)

    @property
    def granted(self) -> tuple[str, ...]:
        """The options this method takes from a grid's budget."""
        return SHARED_BUDGET + (TRAINING_BUDGET if self.trains else ())

    def make_options(
        self, budget: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None
    ) -> MethodOptions:
        """Options from a grid's budget (only what this method takes), overrides, then the pinned values."""
        self.check_overrides(overrides)
        values = {k: v for k, v in (budget or {}).items() if k in self.granted}
        options = self.options(**{**values, **(overrides or {}), **self.fixed})
        options.validate()
        return options

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
        # `given`: the keyword values as stored ("fc": ["fc"])
        default, given = self.options(), self.options(**overrides)
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
        tensor to distil from a model that returns more than one (default: `default_output`)."""
        target = check_target(target)
        options = self.resolve_options(options, overrides)
        check_finite_weights(model)
        check_weight_dtype(model)
        check_stored_weights(model)
        layers = options.layers(model)  # exclude / filter_fn / a model without layers: a clear error now
        check_weight_used_as_stored(layers)
        check_zeros_within_target(layers, target)
        calibration = calibration_data(calibration)
        check_input_dtype(calibration, layer_weight(next(iter(layers.values()))).dtype)
        check_inputs_fit(model, calibration)
        unprunable = unprunable_weights(model)
        if unprunable:
            attention = any(where.startswith("MultiheadAttention.") for where, _ in unprunable.values())
            log.warning(
                "%s: %s stay dense and outside the %.2f%% target, which counts nn.Conv2d/nn.Linear weights only "
                "(e.g. %s); the report's extra['unprunable_weights'] lists them%s",
                self.name,
                describe_unprunable(unprunable),
                100 * target,
                next(iter(unprunable)),
                "; fcpts.attention_as_linear(model) first makes attention's projections Linear layers, which "
                "every method prunes"
                if attention
                else "",
            )
        with tensor_outputs(model, output_fn):
            sparse, report = self.run(model, calibration, target, options)
        check_finite_result(sparse, self.name)
        if unprunable:
            report.extra["unprunable_weights"] = {name: numel for name, (_, numel) in unprunable.items()}
        report.tolerance = options.target_tolerance()
        missed = report.missed_target()
        if missed:
            log.warning("%s: a larger budget (e.g. iterations=) brings it closer", missed)
        return sparse, report


def default_output(output: Any) -> torch.Tensor:
    """The logits in a model's output: a tensor, the 'logits'/'out' entry of a dict, a `.logits` field (named
    tuples with auxiliary heads, Hugging Face outputs), or the first element of a tuple or list."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        for key in LOGIT_KEYS:
            if isinstance(output.get(key), torch.Tensor):
                return output[key]
    elif isinstance(getattr(output, "logits", None), torch.Tensor):
        return output.logits
    elif isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise TypeError(
        f"the model returns {_describe(output)}, and the methods distil one tensor of logits: pass "
        "output_fn=lambda out: ... returning that tensor (e.g. output_fn=lambda out: out['my_head'])"
    )


def _describe(output: Any) -> str:
    if isinstance(output, Mapping):
        return f"a {type(output).__name__} with keys {list(output)}"
    if isinstance(output, (tuple, list)):
        return f"a {type(output).__name__} of {[type(o).__name__ for o in output]}"
    return f"a {type(output).__name__}"


@contextlib.contextmanager
def tensor_outputs(model: nn.Module, output_fn: OutputFn | None = None) -> Iterator[None]:
    """While inside, `model(x)` (and every copy made of it, such as the frozen teacher) returns
    `output_fn(output)` (default: `default_output`)."""
    adapt = output_fn or default_output

    def hook(_module: nn.Module, _args: Any, output: Any) -> torch.Tensor:
        out = output if output_fn is None and isinstance(output, torch.Tensor) else adapt(output)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"output_fn must return the tensor of logits to distil, got {_describe(out)}")
        return out

    with model.register_forward_hook(hook):
        yield


class Registry(Mapping[str, Method]):
    """name -> Method. Reading it first imports the method packages outside `fcpts` (DEFAULT_PACKAGES and the
    entry points), so `fcpts.get_method("pot-erk")` finds a baseline although `fcpts` never imports one."""

    def __init__(self) -> None:
        self._methods: dict[str, Method] = {}
        self._loaded = False

    def add(self, method: Method) -> Method:
        if method.name in self._methods:
            raise ValueError(f"method {method.name!r} is registered twice")
        self._methods[method.name] = method
        return method

    def remove(self, name: str) -> Method:
        """Unregister (tests that register a toy method take it out again)."""
        return self._methods.pop(name)

    def load(self) -> None:
        if self._loaded:
            return
        self._loaded = True  # before importing: a package reading the registry while it loads must not recurse
        try:
            for package in method_packages():
                importlib.import_module(package)
        except BaseException:
            self._loaded = False  # a package that fails to import fails every read, never leaves a silent gap
            raise

    def __getitem__(self, name: str) -> Method:
        self.load()
        return self._methods[name]

    def __iter__(self) -> Iterator[str]:
        self.load()
        ordered = sorted(  # a stable sort: registration order is the last key
            self._methods.values(), key=lambda m: (ROLES.index(m.role), m.family == STUDIED_FAMILY, m.family)
        )
        return iter([m.name for m in ordered])

    def __len__(self) -> int:
        self.load()
        return len(self._methods)

    def __repr__(self) -> str:
        """The registered names in registry order, what `get_method` and `--methods` take."""
        return f"Registry({', '.join(self)})"


def method_packages() -> list[str]:
    """The packages whose import registers methods beyond `fcpts.methods`: entry points of ENTRY_POINT_GROUP,
    then DEFAULT_PACKAGES that are importable (a library installed without them still works)."""
    named = [ep.value.split(":")[0] for ep in entry_points(group=ENTRY_POINT_GROUP)]
    present = [p for p in DEFAULT_PACKAGES if importlib.util.find_spec(p) is not None]
    return list(dict.fromkeys(named + present))


METHODS = Registry()


register = METHODS.add
unregister = METHODS.remove


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; available: {', '.join(sorted(METHODS))}")
    return METHODS[name]


def list_methods(
    role: str | tuple[str, ...] | None = None,
    trains: bool | None = None,
    family: str | None = None,
    ablation: bool | None = None,
) -> list[str]:
    """Names of the registered methods that match every filter given (`role`: one of ROLES, or several), in
    registry order: the paper's baselines, the paper's method, then the methods beyond the paper (the other
    comparisons before FCPTS's own variants); within that, by family name, then in registration order. It is the
    order of `--all-methods`, of the tables' extra rows and of the figures' lines."""
    roles = (role,) if isinstance(role, str) else role
    for r in roles or ():
        if r not in ROLES:
            raise ValueError(f"unknown role {r!r}; roles: {', '.join(ROLES)}")
    return [
        name
        for name, m in METHODS.items()
        if (roles is None or m.role in roles)
        and (trains is None or m.trains == trains)
        and (family is None or m.family == family)
        and (ablation is None or m.ablation == ablation)
    ]


def training_methods() -> list[str]:
    """The methods that run a distillation loop (FCPTS, its fixed-rate ablation, STR, ProbMask, FCPTS+)."""
    return list_methods(trains=True)


def label(name: str) -> str:
    """The display label of a method; an unregistered name (an old record) shows as itself."""
    return METHODS[name].label if name in METHODS else name
