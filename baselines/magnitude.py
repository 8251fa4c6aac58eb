"""Magnitude pruning with a chosen per-layer allocation: no data, no training (context baselines).

`uniform` (the same rate everywhere), `erk` (FCPTS's starting point), `global-magnitude` (one cut over all
layers by |W|), `lamp` (LAMP scores, one global cut). Each lands on exactly round(target * N) zeros.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from torch import nn

from fcpts.core import allocation
from fcpts.core.masks import apply_keep_masks, check_target, sparsity_summary
from fcpts.core.options import MethodOptions, check_choice
from fcpts.core.report import SparsityReport
from fcpts.methods.registry import NOT_IN_PAPER, Method, register

ALLOCATIONS = ("uniform", "erk", "global-magnitude", "lamp")


@dataclass
class MagnitudeOptions(MethodOptions):
    allocation: str = "global-magnitude"

    def validate(self) -> None:
        check_choice(self, "allocation", ALLOCATIONS)


def keep_masks(layers: dict[str, nn.Module], target: float, how: str) -> dict:
    if how == "uniform":
        return allocation.keep_masks_for_rates(layers, allocation.uniform_rates(layers, target), target)
    if how == "erk":
        return allocation.keep_masks_for_rates(layers, allocation.erk_rates(layers, target), target)
    if how == "lamp":
        return allocation.global_keep_masks({n: allocation.lamp_scores(m.weight) for n, m in layers.items()}, target)
    return allocation.global_keep_masks(allocation.global_magnitude_scores(layers), target)


def magnitude(model: nn.Module, calibration, target: float, opts: MagnitudeOptions) -> tuple[nn.Module, SparsityReport]:
    """Keep the largest weights under the allocation; `calibration` is not used."""
    target = check_target(target)
    opts.validate()
    t0 = time.perf_counter()
    opts.place(model)  # the masks are made where the weights are
    layers = opts.layers(model)
    apply_keep_masks(layers, keep_masks(layers, target, opts.allocation))
    model.eval()
    achieved, per_layer = sparsity_summary(model, opts.exclude, opts.filter_fn)
    return model, SparsityReport(
        opts.allocation,
        target,
        achieved,
        per_layer,
        wall_s=time.perf_counter() - t0,
        seed=opts.seed,
        options=opts.to_dict(),
    )


for _name, _label, _summary in (
    ("uniform", "Uniform magnitude", "magnitude pruning, the same rate in every layer"),
    ("erk", "ERK magnitude", "magnitude pruning with ERK rates (FCPTS's starting point)"),
    ("global-magnitude", "Global magnitude", "magnitude pruning, one cut over all layers"),
    ("lamp", "LAMP", "LAMP scores, one global cut"),
):
    register(
        Method(
            _name,
            _label,
            magnitude,
            MagnitudeOptions,
            fixed={"allocation": _name},
            role=NOT_IN_PAPER,
            family="magnitude",
            summary=_summary,
        )
    )
