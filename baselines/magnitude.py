"""Magnitude pruning with a chosen per-layer allocation (uniform, ERK, global magnitude, LAMP): no data, no training,
exactly round(target * N) zeros."""

from __future__ import annotations

import time
from dataclasses import dataclass

from torch import nn

from fcpts.core.allocation import allocation_keep_masks
from fcpts.core.bn import recalibrate_bn
from fcpts.core.calibration import Calibration
from fcpts.core.loop import LoopResult
from fcpts.core.masks import apply_keep_masks
from fcpts.core.options import MethodOptions, check_at_least, check_choice, open_run
from fcpts.core.report import SparsityReport, loop_report
from fcpts.methods.registry import NOT_IN_PAPER, Method, register

ALLOCATIONS = ("uniform", "erk", "global-magnitude", "lamp")


@dataclass
class MagnitudeOptions(MethodOptions):
    allocation: str = "global-magnitude"

    def validate(self) -> None:
        super().validate()
        check_choice(self, "allocation", ALLOCATIONS)


def magnitude(
    model: nn.Module, calibration, target: float, options: MagnitudeOptions
) -> tuple[nn.Module, SparsityReport]:
    """Keep the largest weights under the allocation; `calibration` is not used."""
    t0 = time.perf_counter()
    target, _, layers, _ = open_run(model, None, target, options)  # the masks are made where the weights are
    apply_keep_masks(layers, allocation_keep_masks(layers, target, options.allocation))
    model.eval()
    timed = LoopResult(wall_s=time.perf_counter() - t0)
    return model, loop_report(options.allocation, target, model, options, None, timed, {})


@dataclass
class MagnitudeBNOptions(MagnitudeOptions):
    bn_batch_size: int = 256  # calibration images per forward while the BN statistics are re-estimated

    def validate(self) -> None:
        super().validate()
        check_at_least(self, "bn_batch_size", 1)


def magnitude_bn(
    model: nn.Module, calibration, target: float, options: MagnitudeBNOptions
) -> tuple[nn.Module, SparsityReport]:
    """Magnitude masks, then BN running statistics re-estimated over the calibration images (sparse weights)."""
    calib = Calibration(calibration, options.bn_batch_size, options.seed)
    t0 = time.perf_counter()
    model, report = magnitude(model, calibration, target, options)
    recalibrate_bn(model, calib, options.place(model), options.bn_batch_size)
    model.eval()
    report.method, report.wall_s, report.calibration_indices = "magnitude-bn", time.perf_counter() - t0, calib.indices
    return model, report


register(
    Method(
        "magnitude-bn",
        "Magnitude + BN re-estimation",
        magnitude_bn,
        MagnitudeBNOptions,
        fixed={"allocation": "global-magnitude"},
        role=NOT_IN_PAPER,
        requires=("batchnorm",),
        style=("tab:cyan", "s"),
        summary="global magnitude masks, BatchNorm statistics re-estimated on the calibration set; no reconstruction",
    )
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
            ablation=True,  # an allocation alone, for the allocation studies
            summary=_summary,
        )
    )
