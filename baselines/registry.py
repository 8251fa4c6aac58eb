"""One registry of sparsification methods, all with the same signature:

    method(model, calibration, target, budget) -> (sparse_model, SparsityReport)

`budget` holds what a profile grants every method alike: iterations, batch_size, seed, progress and an
optional checkpoint path for resumable runs. Methods that need no data ignore what they do not use.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

import fcpts
from fcpts import allocation
from fcpts.masks import apply_keep_masks, check_target, prunable_layers, sparsity_summary
from fcpts.options import SparsityReport


@dataclass
class Budget:
    iterations: int = 1600
    batch_size: int = 64
    seed: int = 0
    progress: bool = True
    checkpoint: str | None = None
    options: dict[str, Any] | None = None  # method-specific overrides


Method = Callable[[nn.Module, Any, float, Budget], "tuple[nn.Module, SparsityReport]"]
METHODS: dict[str, Method] = {}
_TRAINS: dict[str, bool] = {}
_OPTIONS: dict[str, Callable[[], type | None]] = {}  # the options dataclass, imported only when asked


def register(name: str, trains: bool = True, options: Callable[[], type | None] = lambda: None):
    """Add a method; `trains` says it runs a distillation loop (tasks then give it augmented data);
    `options` returns the dataclass its `budget.options` overrides must be fields of (None: takes none)."""

    def wrap(fn: Method) -> Method:
        METHODS[name] = fn
        _TRAINS[name] = trains
        _OPTIONS[name] = options
        return fn

    return wrap


def training_methods() -> list[str]:
    """The methods that run a distillation loop (FCPTS, its fixed-rate ablation, STR, ProbMask)."""
    return [m for m in METHODS if _TRAINS[m]]


def check_options(name: str, options: dict | None) -> None:
    """A clear error, before any work, for an override the method does not have (a typo, or an FCPTS-only
    option such as `reconstruction` given to ProbMask)."""
    get_method(name)
    cls = _OPTIONS[name]()
    known = {f.name for f in dataclasses.fields(cls)} if cls else set()
    unknown = sorted(set(options or {}) - known)
    if unknown:
        raise ValueError(f"method {name!r} has no option {', '.join(unknown)}; its options: "
                         f"{', '.join(sorted(known)) or 'none'}")


def method_trains(name: str) -> bool:
    get_method(name)
    return _TRAINS[name]


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; available: {', '.join(sorted(METHODS))}")
    return METHODS[name]


def _fcpts(model, calibration, target, budget: Budget, **fixed):
    opts = dict(iterations=budget.iterations, batch_size=budget.batch_size, seed=budget.seed,
                progress=budget.progress, checkpoint=budget.checkpoint)
    opts.update(fixed)
    opts.update(budget.options or {})
    return fcpts.sparsify(model, calibration, target, **opts)


@register("fcpts", options=lambda: fcpts.FCPTSOptions)
def fcpts_method(model, calibration, target, budget: Budget):
    """FCPTS with learned thresholds (the paper's method)."""
    return _fcpts(model, calibration, target, budget)


@register("fcpts-fixed", options=lambda: fcpts.FCPTSOptions)
def fcpts_fixed(model, calibration, target, budget: Budget):
    """ERK rates held in every layer, FCPTS reconstruction otherwise (the paper's Figure 3 ablation)."""
    return _fcpts(model, calibration, target, budget, learn_thresholds=False)


def _magnitude(name: str, model: nn.Module, target: float, masks_of: Callable) -> tuple[nn.Module, SparsityReport]:
    target = check_target(target)
    t0 = time.perf_counter()
    layers = prunable_layers(model)
    apply_keep_masks(layers, masks_of(layers, target))
    model.eval()
    achieved, per_layer = sparsity_summary(model)
    return model, SparsityReport(name, target, achieved, per_layer, wall_s=time.perf_counter() - t0)


def _pot_options():
    from .pot import POTConfig

    return POTConfig


def _str_options():
    from .str import STRConfig

    return STRConfig


def _probmask_options():
    from .probmask import ProbMaskConfig

    return ProbMaskConfig


def _pot(allocation_name: str, model, calibration, target, budget: Budget):
    from .pot import pot

    cfg = _pot_options()(allocation=allocation_name, seed=budget.seed, progress=budget.progress,
                         checkpoint=budget.checkpoint, **(budget.options or {}))
    return pot(model, calibration, target, cfg)


@register("pot-l2norm", trains=False, options=_pot_options)
def pot_l2norm(model, calibration, target, budget: Budget):
    """POT with the L2Norm global allocation (msbench protocol)."""
    return _pot("l2norm", model, calibration, target, budget)


@register("pot-erk", trains=False, options=_pot_options)
def pot_erk(model, calibration, target, budget: Budget):
    """POT with ERK allocation (msbench protocol)."""
    return _pot("erk", model, calibration, target, budget)


def _budget_config(cls, budget: Budget):
    """A method's config from the common budget plus its profile-specific options."""
    return cls(iterations=budget.iterations, batch_size=budget.batch_size, seed=budget.seed,
               progress=budget.progress, checkpoint=budget.checkpoint, **(budget.options or {}))


@register("str", options=_str_options)
def str_method(model, calibration, target, budget: Budget):
    """STR with a bisection search of its threshold decay; records the sparsity it reached."""
    from .str import str_sparsify

    return str_sparsify(model, calibration, target, _budget_config(_str_options(), budget))


@register("probmask", options=_probmask_options)
def probmask(model, calibration, target, budget: Budget):
    """ProbMask with global projection and a deterministic exact export."""
    from .probmask import probmask_sparsify

    return probmask_sparsify(model, calibration, target, _budget_config(_probmask_options(), budget))


@register("uniform", trains=False)
def uniform(model, calibration, target, budget: Budget):
    """Magnitude pruning, the same rate in every layer."""
    return _magnitude("uniform", model, target,
                      lambda ls, r: allocation.keep_masks_for_rates(ls, allocation.uniform_rates(ls, r), r))


@register("erk", trains=False)
def erk(model, calibration, target, budget: Budget):
    """Magnitude pruning with ERK rates (FCPTS's starting point)."""
    return _magnitude("erk", model, target,
                      lambda ls, r: allocation.keep_masks_for_rates(ls, allocation.erk_rates(ls, r), r))


@register("global-magnitude", trains=False)
def global_magnitude(model, calibration, target, budget: Budget):
    """One magnitude cut over all layers."""
    return _magnitude("global-magnitude", model, target,
                      lambda ls, r: allocation.global_keep_masks(allocation.global_magnitude_scores(ls), r))


@register("lamp", trains=False)
def lamp(model, calibration, target, budget: Budget):
    """LAMP scores, one global cut."""
    return _magnitude("lamp", model, target,
                      lambda ls, r: allocation.global_keep_masks({n: allocation.lamp_scores(m.weight) for n, m in ls.items()}, r))
