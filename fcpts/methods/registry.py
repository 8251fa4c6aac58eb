"""One registry of sparsification methods: a typed record per method, read everywhere a method is named.

    method = get_method("pot-erk")
    sparse, report = method(model, calibration, 0.9, iterations=500)

Every record has the same call: (model, calibration, target, options) -> (sparse model, SparsityReport).
Its label and plot style are the only ones tables, figures and command lines use. A method registers itself
in its own module (`register(Method(...))`); `fcpts.methods` imports every module of the package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from fcpts.core.options import MethodOptions
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

    def __call__(
        self, model: nn.Module, calibration: Any, target: float, options: MethodOptions | None = None, **overrides: Any
    ) -> tuple[nn.Module, SparsityReport]:
        if options is None:
            options = self.make_options(overrides=overrides)
        elif overrides:
            raise TypeError("pass either an options object or keyword options, not both")
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
