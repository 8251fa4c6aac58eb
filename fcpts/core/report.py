"""The report every method returns with its sparse model: enough to reproduce the run and to plot it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


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
