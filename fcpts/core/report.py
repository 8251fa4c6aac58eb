"""The report every method returns with its sparse model: enough to reproduce the run and to plot it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from .calibration import Calibration
from .loop import LoopResult
from .masks import sparsity_summary, weights_in_tensors
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
    # How far the achieved sparsity may lie from the target (`MethodOptions.target_tolerance`), set by the registry
    tolerance: float = 0.0

    def missed_target(self) -> str:
        """'' when the achieved sparsity is the target (to one weight, or within the tolerance); else one line."""
        total = sum(r["numel"] for r in self.per_layer)
        off = abs(self.achieved_sparsity - self.target_sparsity)
        if off * total <= 1 or off <= self.tolerance:
            return ""
        allowed = f"its tolerance {self.tolerance:.2%}" if self.tolerance else "one weight"
        return (
            f"MISSED THE TARGET: {self.method} reached {self.achieved_sparsity:.2%}, not {self.target_sparsity:.2%} "
            f"(more than {allowed} off)"
        )

    @property
    def steps(self) -> int:
        """The optimisation steps run: the loop's, else the layers' own (POT's), else 0."""
        return len(self.history) or sum(int(r.get("iterations") or 0) for r in self.per_layer)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        """One line (`summary()` is the readable view, `to_dict()` the complete one)."""
        return (
            f"SparsityReport(method={self.method!r}, target={self.target_sparsity:.4f}, "
            f"achieved={self.achieved_sparsity:.4f}, layers={len(self.per_layer)}, steps={self.steps}, "
            f"wall_s={self.wall_s:.1f})"
        )

    def summary(self, per_layer: bool = False) -> str:
        """A short table of the run (`per_layer=True`: a row per layer too); a missed target is said first."""
        total = sum(r["numel"] for r in self.per_layer)
        zeros = sum(round(r["sparsity"] * r["numel"]) for r in self.per_layer)
        missed = self.missed_target()
        rows = [
            ("method", self.method),
            ("target", f"{self.target_sparsity:.2%}"),
            ("achieved", f"{self.achieved_sparsity:.2%} ({zeros:,} of {total:,} weights zero)"),
        ]
        if self.per_layer:
            low = min(self.per_layer, key=lambda r: r["sparsity"])
            high = max(self.per_layer, key=lambda r: r["sparsity"])
            spread = f"{low['sparsity']:.1%} ({layer_label(low)}) to {high['sparsity']:.1%} ({layer_label(high)})"
            rows.append(("layers", f"{len(self.per_layer)} pruned, per-layer sparsity {spread}"))
        unprunable = self.extra.get("unprunable_weights", {})
        if unprunable:
            held = f"{weights_in_tensors(list(unprunable.values()))} of layers no method here prunes"
            rows.append(("not pruned", f"{held} (e.g. {next(iter(unprunable))}), outside the target"))
        if self.history:
            last = self.history[-1]
            loss = f", final loss {last['loss']:.4g}" if "loss" in last else ""
            rows.append(("steps", f"{len(self.history)}{loss}"))
        elif self.steps:
            rows.append(("steps", f"{self.steps:,} over {len(self.per_layer)} layers (each its own)"))
        rows += [("time", f"{self.wall_s:.1f} s"), ("seed", str(self.seed))]
        if per_layer:
            rows += [(f"  {layer_label(r)}", f"{r['sparsity']:.2%} of {r['numel']:,}") for r in self.per_layer]
        width = max(len(k) for k, _ in rows)
        return "\n".join([*([missed] if missed else []), *(f"{k:<{width}}  {v}" for k, v in rows)])


def layer_label(row: dict) -> str:
    """A per-layer row as a reader finds the layer: its module path and type, e.g. `6 (Linear)`."""
    return f"{row['name']} ({row['type']})" if row.get("type") else row["name"]


def loop_report(
    method: str,
    target: float,
    model: nn.Module,
    options: MethodOptions,
    calib: Calibration | None,
    loop: LoopResult,
    extra: dict[str, Any],
) -> SparsityReport:
    """A run's report: the sparsity measured on the finished `model`, the loop's history, time and how its steps
    ran, and what reproduces the run (`calib` None: a method that reads no calibration data)."""
    achieved, per_layer = sparsity_summary(model, options.exclude, options.filter_fn)
    return SparsityReport(
        method=method,
        target_sparsity=target,
        achieved_sparsity=achieved,
        per_layer=per_layer,
        history=loop.history,
        wall_s=loop.wall_s,
        seed=options.seed,
        calibration_indices=calib.indices if calib is not None else [],
        options=options.to_dict(),
        extra={**extra, **loop.steps_on},
    )
