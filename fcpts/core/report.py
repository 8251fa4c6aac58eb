"""The report every method returns with its sparse model: enough to reproduce the run and to plot it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from .calibration import Calibration
from .loop import LoopResult
from .masks import sparsity_summary
from .options import MethodOptions


@dataclass
class SparsityReport:
    """What a sparsification did: enough to reproduce it and to plot it."""

    method: str
    target_sparsity: float
    achieved_sparsity: float
    per_layer: list[dict]  # name, numel, sparsity (and the method's own extras, e.g. threshold)
    history: list[dict] = field(default_factory=list)  # per step: loss terms, sparsity, lr
    wall_s: float = 0.0
    seed: int = 0
    calibration_indices: list[int] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def loop_report(
    method: str,
    target: float,
    model: nn.Module,
    options: MethodOptions,
    calib: Calibration,
    loop: LoopResult,
    extra: dict[str, Any],
) -> SparsityReport:
    """The report of a training-loop method: the sparsity measured on the finished `model`, the loop's history
    and time, and the options, seed and calibration images that reproduce the run."""
    achieved, per_layer = sparsity_summary(model, options.exclude, options.filter_fn)
    return SparsityReport(
        method=method,
        target_sparsity=target,
        achieved_sparsity=achieved,
        per_layer=per_layer,
        history=loop.history,
        wall_s=loop.wall_s,
        seed=options.seed,
        calibration_indices=calib.indices,
        options=options.to_dict(),
        extra=extra,
    )
