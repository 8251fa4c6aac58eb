"""STR: Soft Threshold Reparameterization (Kusupati et al. 2020) under the post-training budget.

W_s = sign(W) * relu(|W| - sigmoid(s_l)); STR cannot aim at a target, so the weight decay on s is bisected over
`search_runs` trials and the closest kept (a miss stays a miss). Finished trials are reused across targets.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fcpts.core.calibration import Calibration
from fcpts.core.checkpoint import Checkpoint
from fcpts.core.loop import (
    LoopResult,
    StepBatches,
    frozen_teacher,
    kl_loss,
    lr_schedulers,
    run_checkpoint,
    run_identity,
    train_loop,
)
from fcpts.core.masks import parametrize_weights, sparsity_summary, unparametrize_weights
from fcpts.core.options import TrainingOptions, check_at_least, fitted_iterations, open_run
from fcpts.core.report import SparsityReport, loop_report
from fcpts.methods.registry import PAPER_BASELINE, Method, register

log = logging.getLogger("fcpts")


@dataclass
class STROptions(TrainingOptions):
    s_init: float = -10.0  # sigmoid(-10) = 4.5e-5: starts (almost) dense
    decay_range: tuple[float, float] = (1e-3, 10.0)  # searched weight decay on s
    search_runs: int = 5
    tolerance: float = 0.005  # stop searching once |sparsity - target| is below this

    def fit_budget(self, n_images: int) -> None:
        """Left at None, the iterations of one trial: the training-loop budget shared by the `search_runs` trials."""
        if self.iterations is None:
            super().fit_budget(n_images)
            self.iterations = max(1, fitted_iterations(self.iterations) // self.search_runs)

    def target_tolerance(self) -> float:
        return self.tolerance  # no exact step: the trial closest to the target is the result

    def validate(self) -> None:
        super().validate()
        if self.iterations is not None and self.iterations < 1:
            raise ValueError(
                "STR reaches sparsity only by training its thresholds: iterations must be >= 1, got "
                f"{self.iterations} (for pruning without training use a magnitude method, e.g. 'global-magnitude')"
            )
        check_at_least(self, "search_runs", 1)
        check_at_least(self, "tolerance", 0.0, inclusive=False)
        low, high = self.decay_range
        if not 0 <= low <= high:
            raise ValueError(f"option decay_range must be (low, high) with 0 <= low <= high, got {self.decay_range!r}")


class SoftThreshold(nn.Module):
    """Parametrization W -> sign(W) * relu(|W| - sigmoid(s))."""

    def __init__(self, s_init: float):
        super().__init__()
        self.score = nn.Parameter(torch.tensor(float(s_init)))

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return torch.sign(weight) * F.relu(weight.abs() - torch.sigmoid(self.score))


def _trial(
    dense: nn.Module, calib: Calibration, decay: float, options: STROptions, device, identity: dict, ckpt: str | None
):
    model = copy.deepcopy(dense)
    teacher = frozen_teacher(dense, options.teacher_mode)
    layers = options.layers(model)
    params = parametrize_weights(layers, lambda *_: SoftThreshold(options.s_init).to(device))
    scores = [p.score for p in params.values()]
    ids = {id(s) for s in scores}
    weights = [p for p in model.parameters() if id(p) not in ids]
    groups = [{"params": weights, "weight_decay": options.weight_decay}, {"params": scores, "weight_decay": decay}]
    opt = torch.optim.SGD(groups, lr=options.resolved_lr(calib.batch_size), momentum=options.momentum)
    schedulers, _ = lr_schedulers(options, calib, opt)

    checkpoint = run_checkpoint(options, {**identity, "decay": decay}, f"str trial decay={decay:.3g}", ckpt)
    loop = train_loop(
        model,
        teacher,
        StepBatches(calib, device),
        options,
        schedulers,
        kl_loss(options.temperature),
        checkpoint,
        desc=f"str decay={decay:.3g}",
    )
    unparametrize_weights(layers, leave_parametrized=True)  # sign(W) relu(|W| - t) as plain weights
    model.eval()
    sparsity, _ = sparsity_summary(model, options.exclude, options.filter_fn)
    return model, sparsity, loop


def _trial_cache(options: STROptions, identity: dict, decay: float) -> Checkpoint:
    """Where the finished trial at `decay` is kept, shared by runs at other targets and search settings."""
    trial_identity = {
        **identity,
        "target": None,
        "decay": decay,
        "options": {
            k: v for k, v in identity["options"].items() if k not in ("search_runs", "tolerance", "decay_range")
        },
    }
    folder = Path(options.checkpoint).parent / "str-trials" if options.checkpoint else None
    cache = Checkpoint(None, trial_identity, label=f"str trial decay={decay:.3g}")
    cache.path = folder / f"{cache.key}.pt" if folder else None
    return cache


def str_sparsify(model: nn.Module, calibration, target: float, options: STROptions) -> tuple[nn.Module, SparsityReport]:
    """STR at the trial whose sparsity is closest to `target` (no exact step: a miss stays a miss)."""
    target, device, _, _ = setup = open_run(model, calibration, target, options)
    calib = setup.required_calib()
    extra: dict[str, Any] = {"trials": [], "chosen_decay": None}  # target 0: the dense model is the closest
    best = LoopResult()
    if target > 0:
        best, extra = _search(model, calib, target, options, device)
    model.eval()
    report = loop_report("str", target, model, options, calib, best, extra)
    report.extra["converged_to_target"] = abs(report.achieved_sparsity - target) < options.tolerance
    report.extra["reused_trials"] = sum(bool(t.get("reused")) for t in extra["trials"])
    return model, report


def _search(
    model: nn.Module, calib: Calibration, target: float, options: STROptions, device: torch.device
) -> tuple[LoopResult, dict[str, Any]]:
    """The bisection over the weight decay on s, resumed where it stopped; `model` left at the closest trial."""
    dense = copy.deepcopy(model)
    identity = run_identity(target, options, calib, dense)
    search = run_checkpoint(
        options, identity, f"str {target:.2%} search", options.checkpoint + ".trials.pt" if options.checkpoint else None
    )
    state = search.load() or {"trials": [], "best": None}
    while len(state["trials"]) < options.search_runs:
        if state["trials"] and min(abs(t["sparsity"] - target) for t in state["trials"]) < options.tolerance:
            break
        lo, hi = (math.log10(v) for v in options.decay_range)
        for t in state["trials"]:  # the bisection's bracket after the trials so far
            lo, hi = (math.log10(t["decay"]), hi) if t["sparsity"] < target else (lo, math.log10(t["decay"]))
        decay = 10 ** ((lo + hi) / 2)
        k = len(state["trials"])
        trial_ckpt = f"{options.checkpoint}.trial{k}" if options.checkpoint else None
        cache = _trial_cache(options, identity, decay)
        done = cache.load()
        if done is not None:
            row, trial_state, history = {**done["row"], "reused": True}, done["state"], done["history"]
        else:
            trial_model, sparsity, loop = _trial(dense, calib, decay, options, device, identity, trial_ckpt)
            row = {"decay": decay, "sparsity": sparsity, "wall_s": loop.wall_s, "final_rec": loop.history[-1]["rec"]}
            trial_state, history = trial_model.state_dict(), loop.history
            cache.save({"row": row, "state": trial_state, "history": history}, progress="a finished trial")
        sparsity = row["sparsity"]
        if state["best"] is None or abs(sparsity - target) < abs(state["best"]["row"]["sparsity"] - target):
            state["best"] = {"row": row, "state": trial_state, "history": history}
        state["trials"].append(row)
        search.save(state, progress=f"trial {len(state['trials'])} of at most {options.search_runs}")
        if trial_ckpt:
            Path(trial_ckpt).unlink(missing_ok=True)
    model.load_state_dict(state["best"]["state"])
    best = LoopResult(state["best"]["history"], wall_s=sum(t["wall_s"] for t in state["trials"]))
    return best, {"trials": state["trials"], "chosen_decay": state["best"]["row"]["decay"]}


register(
    Method(
        "str",
        "STR",
        str_sparsify,
        STROptions,
        role=PAPER_BASELINE,  # Table 1 only, at its own targets: no grid's paper table has it
        style=("tab:brown", "D"),
        summary="STR with a bisection search of its threshold decay; records the sparsity it reached",
    )
)
