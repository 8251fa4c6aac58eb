"""The net-wise distillation loop shared by FCPTS and the learned-mask baselines (STR, ProbMask).

A frozen dense teacher and the student see the same calibration batch each step; the caller supplies
the loss on (student output, teacher output, step). The loop owns progress, history, and checkpoints:
everything needed to resume (student, teacher, optimiser, scheduler, step, history, elapsed time) is
saved atomically every `checkpoint_every_s` and at the end, and a matching checkpoint is resumed.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from .bn_fold import fold_batchnorm
from .calibration import Calibration


@dataclass
class DistillConfig:
    """The budget and optimiser every distillation-based method shares (FCPTS's released defaults)."""

    iterations: int = 1600
    batch_size: int = 64
    lr: float | None = None  # None: default_lr(batch_size)
    momentum: float = 0.9
    weight_decay: float = 3e-4
    temperature: float = 4.0  # KL temperature
    teacher_mode: str = "train"
    seed: int = 0
    progress: bool = True
    checkpoint: str | None = None
    checkpoint_every_s: float = 180.0

    def resolved_lr(self, batch_size: int) -> float:
        return self.lr if self.lr is not None else default_lr(batch_size)


def default_lr(batch_size: int) -> float:
    """The released code's SGD learning rate: 0.04 x batch / 256."""
    return 0.04 * batch_size / 256


def kl_distill(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher || student) on softened outputs, summed, times T^2 / batch (released code)."""
    log_p_s = F.log_softmax(student_logits.flatten(1) / temperature, dim=1)
    p_t = F.softmax(teacher_logits.flatten(1) / temperature, dim=1)
    return F.kl_div(log_p_s, p_t, reduction="sum") * temperature**2 / student_logits.shape[0]


def warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """LR factor: linear warm-up over `warmup` steps, then cosine to 0 at `total` (per iteration)."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def frozen_teacher(model: nn.Module, mode: str) -> nn.Module:
    """A copy of the dense model that never trains; mode "train" normalises with batch statistics.

    In "eval" mode BatchNorm is folded into the convs where torch.fx can trace the model: the same
    outputs (to float rounding) for less work per step.
    """
    teacher = copy.deepcopy(model)
    teacher.train(mode == "train")
    if mode == "eval":
        try:
            fold_batchnorm(teacher)
        except ValueError:
            pass  # not traceable: keep BN, same results
    teacher.requires_grad_(False)
    return teacher


def run_fingerprint(target: float, options: dict, calib: Calibration, model: nn.Module) -> str:
    """Identity of a run (target, options, calibration indices, model size), so a checkpoint is only
    ever resumed by the same run."""
    keep = {k: v for k, v in options.items() if k not in ("progress", "checkpoint", "checkpoint_every_s", "device")}
    blob = json.dumps({"target": target, "options": keep, "calibration": calib.indices,
                       "params": sum(p.numel() for p in model.parameters())}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def save_atomic(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


@dataclass
class LoopResult:
    history: list[dict] = field(default_factory=list)
    resumed_from_step: int = 0
    wall_s: float = 0.0


LossFn = Callable[[torch.Tensor, torch.Tensor, int], "tuple[torch.Tensor, dict[str, float]]"]


def train_loop(
    *,
    model: nn.Module,
    teacher: nn.Module,
    calib: Calibration,
    iterations: int,
    optimizer: torch.optim.Optimizer | list[torch.optim.Optimizer],
    scheduler: torch.optim.lr_scheduler.LRScheduler | list[torch.optim.lr_scheduler.LRScheduler],
    loss_fn: LossFn,
    device: torch.device,
    fingerprint: str,
    checkpoint: str | None = None,
    checkpoint_every_s: float = 180.0,
    before_step: Callable[[int], None] | None = None,
    after_step: Callable[[int], None] | None = None,
    progress: bool = True,
    desc: str = "distill",
    channels_last: bool = False,
) -> LoopResult:
    optimizers = optimizer if isinstance(optimizer, list) else [optimizer]
    schedulers = scheduler if isinstance(scheduler, list) else [scheduler]
    ckpt = Path(checkpoint) if checkpoint else None
    result, elapsed_before = LoopResult(), 0.0
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=False)
        if state.get("fingerprint") != fingerprint:
            raise ValueError(
                f"checkpoint {ckpt} belongs to a different run (target/options/calibration differ); "
                "delete it or pass another checkpoint path"
            )
        model.load_state_dict(state["model"])
        teacher.load_state_dict(state["teacher"])
        for o, st in zip(optimizers, state["optimizers"]):
            o.load_state_dict(st)
        for sch, st in zip(schedulers, state["schedulers"]):
            sch.load_state_dict(st)
        result.history, elapsed_before = state["history"], state["elapsed_s"]
        result.resumed_from_step = state["step"]

    t0 = last_save = time.perf_counter()

    def save(step: int) -> None:
        if ckpt is not None:
            save_atomic({"fingerprint": fingerprint, "step": step, "model": model.state_dict(),
                         "teacher": teacher.state_dict(),
                         "optimizers": [o.state_dict() for o in optimizers],
                         "schedulers": [sch.state_dict() for sch in schedulers], "history": result.history,
                         "elapsed_s": elapsed_before + time.perf_counter() - t0}, ckpt)

    start = result.resumed_from_step
    model.train()
    bar = tqdm(range(start, iterations), initial=start, total=iterations, disable=not progress, desc=desc,
               dynamic_ncols=True)
    for step in bar:
        step_t0 = time.perf_counter()
        if before_step is not None:
            before_step(step)
        x = calib.batch(step).to(device)
        if channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            y_t = teacher(x)
        loss, logs = loss_fn(model(x), y_t, step)
        for o in optimizers:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for o in optimizers:
            o.step()
        for sch in schedulers:
            sch.step()
        if after_step is not None:
            after_step(step)
        result.history.append({"step": step, "loss": round(loss.item(), 6),
                               **{k: round(v, 8) for k, v in logs.items()}, "lr": schedulers[0].get_last_lr()[0],
                               "step_s": round(time.perf_counter() - step_t0, 5)})
        if step % 10 == 0:
            bar.set_postfix({k: f"{v:.4g}" for k, v in logs.items()})
        if time.perf_counter() - last_save > checkpoint_every_s:
            save(step + 1)
            last_save = time.perf_counter()
    bar.close()
    if iterations > start:
        save(iterations)
    result.wall_s = elapsed_before + time.perf_counter() - t0
    return result
