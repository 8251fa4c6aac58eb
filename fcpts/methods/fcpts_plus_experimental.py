"""FCPTS+'s options that the ablation did not keep (docs/notebook/beyond-the-paper.md): each was below FCPTS+'s
defaults on the ablation cell, or failed on a second one. They stay options of `fcpts-plus`, all off by default,
so the records made with them re-run; `fcpts_plus.Plan` applies them.

- `start`: "magnitude" (FCPTS), "obs-allocation" (dense weights at `obs`'s per-layer rates) or "obs" (obs's
  pruned and updated weights and rates: the loop fine-tunes a second-order solution).
- `mix`: "mixup" or "cutmix" of calibration images within a batch (share ~ Beta(`mix_alpha`, `mix_alpha`)),
  teacher and student on the same mixed images; a seeded draw per step, so runs stay resumable.
- `projection`: before every step all thresholds scaled by one factor so the masks hold exactly the target.
- `ramp_hold="ratios"`: a ramp scales the target's ERK thresholds onto each step's level instead of each
  level's ERK rates.
- `lr_restart`: at the ramp's end the learning rate restarts a second cosine (learning-rate rewinding).
- `dense_gradient`: pruned weights get the gradient as if kept (straight-through), so they can grow back.
- `relative_blocks`: each block's MSE divided by the mean square of the teacher's block output.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn

from fcpts.core.options import check_choice

from .fcpts import block_mse
from .registry import get_method


@dataclass
class ExperimentalOptions:
    """The options of `fcpts-plus` that the ablation did not keep (module docstring); each default is off."""

    start: Literal["magnitude", "obs-allocation", "obs"] = "magnitude"
    mix: Literal["none", "mixup", "cutmix"] = "none"
    mix_alpha: float = 1.0
    ramp_hold: Literal["erk", "ratios"] = "erk"  # what a ramp holds: each level's ERK rates, or the thresholds' ratios
    lr_restart: bool = False  # a second cosine learning-rate cycle from the ramp's end
    projection: bool = False  # thresholds scaled onto the target before every step
    relative_blocks: bool = False  # block MSE relative to the teacher block's mean square
    dense_gradient: bool = False  # pruned weights get the gradient too and may grow back

    def validate_experimental(self, ramp: float | None, erk_power: float | str) -> None:
        """`ramp`: the fixed ramp, or None for "auto" (which ramps only from a magnitude start)."""
        check_choice(self, "start", ("magnitude", "obs-allocation", "obs"))
        check_choice(self, "mix", ("none", "mixup", "cutmix"))
        check_choice(self, "ramp_hold", ("erk", "ratios"))
        if self.mix_alpha <= 0:
            raise ValueError(f"mix_alpha must be > 0 (the Beta distribution's parameter), got {self.mix_alpha}")
        if self.lr_restart and ramp is not None and ramp <= 0:
            raise ValueError("lr_restart restarts the learning rate at the ramp's end: set ramp > 0, or no lr_restart")
        if erk_power not in (1.0, "auto") and self.start != "magnitude":
            raise ValueError(f"erk_power sets the magnitude start's rates: use start='magnitude', not {self.start!r}")
        if ramp is not None and ramp > 0 and self.start != "magnitude":
            raise ValueError(
                f"a ramp starts from the dense weights: use start='magnitude', or ramp=0 with start={self.start!r}"
            )


def batch_mixer(how: str, alpha: float, seed: int) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """x, step -> the batch with its images mixed in pairs; the draw depends only on (seed, step)."""

    def mix(x: torch.Tensor, step: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
        share = float(np.random.default_rng([seed, step]).beta(alpha, alpha))
        partner = torch.randperm(x.shape[0], generator=gen).to(x.device)
        if how == "mixup":
            return share * x + (1 - share) * x[partner]
        h, w = x.shape[-2:]
        cut_h, cut_w = int(h * (1 - share) ** 0.5), int(w * (1 - share) ** 0.5)
        top = int(torch.randint(h - cut_h + 1, (1,), generator=gen))
        left = int(torch.randint(w - cut_w + 1, (1,), generator=gen))
        out = x.clone()
        out[..., top : top + cut_h, left : left + cut_w] = x[partner][..., top : top + cut_h, left : left + cut_w]
        return out

    return mix


def relative_block_mse(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """`block_mse` divided by the mean square of the teacher's output: the same for a block whatever the scale
    of its activations, so no block dominates the sum by its scale alone."""
    return block_mse(student, teacher) / teacher.detach().float().square().mean().clamp_min(1e-12)


def obs_start(model: nn.Module, calibration, target: float, options) -> tuple[dict[str, float], nn.Module, dict]:
    """`start="obs"` or `"obs-allocation"`: obs prunes `model` in place; returns its per-layer rates, the dense
    model copied before (the teacher), and what the report says of the start. "obs-allocation" then puts the
    dense weights back, keeping only obs's rates."""
    dense = copy.deepcopy(model)
    obs = get_method("obs")
    obs_opts = obs.options(
        seed=options.seed,
        device=options.device,
        exclude=options.exclude,
        filter_fn=options.filter_fn,
        progress=options.progress,
    )
    _, report = obs.run(model, calibration, target, obs_opts)
    rates = {row["name"]: row["sparsity"] for row in report.per_layer}
    if options.start == "obs-allocation":
        model.load_state_dict(dense.state_dict())
    return rates, dense, {"how": options.start, "obs_wall_s": round(report.wall_s, 1), "obs_options": report.options}
