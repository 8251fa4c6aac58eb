"""STR: Soft Threshold Reparameterization (Kusupati et al. 2020) under the post-training budget.

Each prunable weight becomes W_s = sign(W) * relu(|W| - sigmoid(s_l)), one learnable scalar s_l per
layer (kept weights are shrunk by the threshold, unlike FCPTS). Sparsity is driven only indirectly:
weight decay on s pulls it from a very negative start (nearly dense) towards 0, raising thresholds. STR
cannot aim at a target, so we search the decay on s by bisection in log space over `search_runs` full
trials (each with the same distillation budget as FCPTS: same calibration data, iterations, optimiser,
KL on outputs) and keep the trial whose sparsity is closest to the target. The report states the
sparsity reached and every trial; there is no exact-target step, so a miss stays a miss.
"""
from __future__ import annotations

import copy
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
    for t in state["trials"]:  # replay the search decisions of finished trials
        lo, hi = (math.log10(t["decay"]), hi) if t["sparsity"] < target else (lo, math.log10(t["decay"]))
    while len(state["trials"]) < cfg.search_runs:
        if state["trials"] and min(abs(t["sparsity"] - target) for t in state["trials"]) < cfg.tolerance:
            break
        decay = 10 ** ((lo + hi) / 2)
        k = len(state["trials"])
        trial_ckpt = f"{cfg.checkpoint}.trial{k}" if cfg.checkpoint else None
        trial_model, sparsity, loop = _trial(dense, calib, target, decay, cfg, device, trial_ckpt)
        row = {"decay": decay, "sparsity": sparsity, "wall_s": loop.wall_s, "final_rec": loop.history[-1]["rec"]}
        if state["best"] is None or abs(sparsity - target) < abs(state["best"]["row"]["sparsity"] - target):
            state["best"] = {"row": row, "state": trial_model.state_dict(), "history": loop.history}
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
               "converged_to_target": abs(achieved - target) < cfg.tolerance},
    )
