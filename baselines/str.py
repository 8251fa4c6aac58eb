"""STR: Soft Threshold Reparameterization (Kusupati et al. 2020) under the post-training budget.

Each prunable weight becomes W_s = sign(W) * relu(|W| - sigmoid(s_l)), one learnable scalar s_l per
layer (kept weights are shrunk by the threshold, unlike FCPTS). Sparsity is driven only indirectly:
weight decay on s pulls it from a very negative start (nearly dense) towards 0, raising thresholds. STR
cannot aim at a target, so we search the decay on s by bisection in log space over `search_runs` full
trials (each with the same distillation budget as FCPTS: same calibration data, iterations, optimiser,
KL on outputs) and keep the trial whose sparsity is closest to the target. The report states the
sparsity reached and every trial; there is no exact-target step, so a miss stays a miss.

A trial never looks at the target (its batches depend only on the step), and the bisection starts at the
same decay for every target, so runs at several targets share their first trials: with a checkpoint
path, finished trials are kept in `str-trials/` beside it and reused by any run that differs only in its
target (marked `reused` in the report; wall_s still counts their compute).
"""
from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from fcpts.calibration import Calibration
from fcpts.distill import (DistillConfig, frozen_teacher, kl_distill, run_fingerprint, save_atomic, train_loop,
                           warmup_cosine)
from fcpts.masks import check_target, prunable_layers, sparsity_summary
from fcpts.options import SparsityReport


@dataclass
class STRConfig(DistillConfig):
    s_init: float = -10.0  # sigmoid(-10) = 4.5e-5: starts (almost) dense
    decay_range: tuple[float, float] = (1e-3, 10.0)  # searched weight decay on s
    search_runs: int = 5
    tolerance: float = 0.005  # stop searching once |sparsity - target| is below this


class SoftThreshold(nn.Module):
    """Parametrization W -> sign(W) * relu(|W| - sigmoid(s))."""

    def __init__(self, s_init: float):
        super().__init__()
        self.score = nn.Parameter(torch.tensor(float(s_init)))

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return torch.sign(weight) * F.relu(weight.abs() - torch.sigmoid(self.score))


def _trial(dense: nn.Module, calib: Calibration, target: float, decay: float, cfg: STRConfig, device,
           ckpt: str | None):
    model = copy.deepcopy(dense)
    teacher = frozen_teacher(dense, cfg.teacher_mode)
    layers = prunable_layers(model)
    scores = []
    for module in layers.values():
        p = SoftThreshold(cfg.s_init).to(device)
        parametrize.register_parametrization(module, "weight", p)
        scores.append(p.score)
    ids = {id(s) for s in scores}
    lr = cfg.resolved_lr(calib.batch_size)
    opt = torch.optim.SGD([{"params": [p for p in model.parameters() if id(p) not in ids], "weight_decay": cfg.weight_decay},
                           {"params": scores, "weight_decay": decay}], lr=lr, momentum=cfg.momentum)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(calib.steps_per_epoch, cfg.iterations))

    def loss_fn(y_s, y_t, _step):
        rec = kl_distill(y_s, y_t, cfg.temperature)
        return rec, {"rec": rec.item()}

    loop = train_loop(model=model, teacher=teacher, calib=calib, iterations=cfg.iterations, optimizer=opt,
                      scheduler=sched, loss_fn=loss_fn, device=device, fingerprint=run_fingerprint(target, {**asdict(cfg), "decay": decay}, calib, model),
                      checkpoint=ckpt, checkpoint_every_s=cfg.checkpoint_every_s, progress=cfg.progress,
                      desc=f"str decay={decay:.3g}")
    for module in layers.values():  # fold sign(W) relu(|W| - t) into plain weights
        parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
    model.eval()
    sparsity, _ = sparsity_summary(model)
    return model, sparsity, loop


def _trial_identity(cfg: STRConfig, dense: nn.Module) -> dict | None:
    """Everything a trial depends on but its decay (not the target or the search), for the trial cache."""
    if not cfg.checkpoint:
        return None
    digest = hashlib.sha256()
    for t in dense.state_dict().values():
        digest.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    options = {k: v for k, v in asdict(cfg).items() if k not in ("search_runs", "tolerance", "decay_range")}
    return {**options, "dense": digest.hexdigest()}


def _trial_cache(cfg: STRConfig, identity: dict | None, calib: Calibration, dense: nn.Module, decay: float) -> Path | None:
    """Where the finished trial at `decay` is kept, shared by runs at other targets."""
    if identity is None:
        return None
    key = run_fingerprint(None, {**identity, "decay": decay}, calib, dense)
    return Path(cfg.checkpoint).parent / "str-trials" / f"{key}.pt"


def str_sparsify(model: nn.Module, calibration, target: float, cfg: STRConfig) -> tuple[nn.Module, SparsityReport]:
    target = check_target(target)
    device = next(model.parameters()).device
    prunable_layers(model)  # clear error before any work
    calib = Calibration(calibration, cfg.batch_size, cfg.seed)
    dense = copy.deepcopy(model)
    side = Path(cfg.checkpoint + ".trials.pt") if cfg.checkpoint else None
    fingerprint = run_fingerprint(target, asdict(cfg), calib, dense)
    state = {"fingerprint": fingerprint, "trials": [], "best": None}
    if side is not None and side.exists():
        state = torch.load(side, weights_only=False)
        if state.get("fingerprint") != fingerprint:
            raise ValueError(f"STR trials file {side} belongs to a different run; delete it or pass another path")
    lo, hi = (math.log10(v) for v in cfg.decay_range)
    identity = _trial_identity(cfg, dense)
    for t in state["trials"]:  # replay the search decisions of finished trials
        lo, hi = (math.log10(t["decay"]), hi) if t["sparsity"] < target else (lo, math.log10(t["decay"]))
    while len(state["trials"]) < cfg.search_runs:
        if state["trials"] and min(abs(t["sparsity"] - target) for t in state["trials"]) < cfg.tolerance:
            break
        decay = 10 ** ((lo + hi) / 2)
        k = len(state["trials"])
        trial_ckpt = f"{cfg.checkpoint}.trial{k}" if cfg.checkpoint else None
        cache = _trial_cache(cfg, identity, calib, dense, decay)
        if cache is not None and cache.exists():
            done = torch.load(cache, weights_only=False)
            row, trial_state, history = {**done["row"], "reused": True}, done["state"], done["history"]
        else:
            trial_model, sparsity, loop = _trial(dense, calib, target, decay, cfg, device, trial_ckpt)
            row = {"decay": decay, "sparsity": sparsity, "wall_s": loop.wall_s, "final_rec": loop.history[-1]["rec"]}
            trial_state, history = trial_model.state_dict(), loop.history
            if cache is not None:
                save_atomic({"row": row, "state": trial_state, "history": history}, cache)
        sparsity = row["sparsity"]
        if state["best"] is None or abs(sparsity - target) < abs(state["best"]["row"]["sparsity"] - target):
            state["best"] = {"row": row, "state": trial_state, "history": history}
        state["trials"].append(row)
        if side is not None:
            save_atomic(state, side)
            Path(trial_ckpt).unlink(missing_ok=True)
        lo, hi = (math.log10(decay), hi) if sparsity < target else (lo, math.log10(decay))
    model.load_state_dict(state["best"]["state"])
    model.eval()
    achieved, per_layer = sparsity_summary(model)
    best = state["best"]["row"]
    return model, SparsityReport(
        method="str", target_sparsity=target, achieved_sparsity=achieved, per_layer=per_layer,
        history=state["best"]["history"], wall_s=sum(t["wall_s"] for t in state["trials"]), seed=cfg.seed,
        calibration_indices=calib.indices, options=asdict(cfg),
        extra={"trials": state["trials"], "chosen_decay": best["decay"],
               "converged_to_target": abs(achieved - target) < cfg.tolerance,
               "reused_trials": sum(bool(t.get("reused")) for t in state["trials"])},
    )
