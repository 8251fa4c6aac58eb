"""The net-wise distillation loop shared by every training-loop method (FCPTS, STR, ProbMask).

A frozen dense teacher and the student see the same calibration batch each step; the caller supplies the
loss on (student output, teacher output, step). The loop owns progress, history, the finiteness checks and
the checkpoint: everything needed to resume (student, teacher, optimisers, schedulers, step, history,
elapsed time) is saved through `fcpts.core.checkpoint` by time and by steps and at the end.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from .bn import fold_batchnorm
from .calibration import Calibration
from .checkpoint import Checkpoint
from .io import tensors_sha256
from .options import MethodOptions, TrainingOptions

LossFn = Callable[[torch.Tensor, torch.Tensor, int], "tuple[torch.Tensor, dict[str, Any]]"]
# Options that change how a run is watched or saved, never its result.
NOT_IDENTITY = ("progress", "checkpoint", "checkpoint_every_s", "checkpoint_every_steps", "device")


def kl_distill(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher || student) on softened outputs, summed, times T^2 / batch (released code)."""
    log_p_s = F.log_softmax(student_logits.flatten(1) / temperature, dim=1)
    p_t = F.softmax(teacher_logits.flatten(1) / temperature, dim=1)
    return F.kl_div(log_p_s, p_t, reduction="sum") * temperature**2 / student_logits.shape[0]


def kl_loss(temperature: float) -> LossFn:
    """The output KL alone as a loop's loss (STR, ProbMask)."""

    def loss_fn(y_s: torch.Tensor, y_t: torch.Tensor, _step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        rec = kl_distill(y_s, y_t, temperature)
        return rec, {"rec": rec.item()}

    return loss_fn


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


def run_identity(
    target: float | None, options: MethodOptions | dict, calib: Calibration, model: nn.Module, **extra: Any
) -> dict:
    """Everything that changes a run's result: target, options, calibration images, the dense weights."""
    opts = options.to_dict() if isinstance(options, MethodOptions) else dict(options)
    return {
        "target": target,
        "options": {k: v for k, v in opts.items() if k not in NOT_IDENTITY},
        "calibration": calib.indices,
        "dense_weights": tensors_sha256(model.state_dict()),
        **extra,
    }


def run_checkpoint(options: MethodOptions, identity: dict, label: str, path: str | None = None) -> Checkpoint:
    return Checkpoint(
        path or options.checkpoint,
        identity,
        every_s=options.checkpoint_every_s,
        every_steps=options.checkpoint_every_steps,
        label=label,
    )


@dataclass
class LoopResult:
    history: list[dict] = field(default_factory=list)
    resumed_from_step: int = 0
    wall_s: float = 0.0


def _finite_or_raise(value: float, what: str, step: int, desc: str) -> None:
    if not math.isfinite(value):
        raise FloatingPointError(
            f"{desc}: {what} is {value} at step {step}; check the calibration images and the dense model's "
            "outputs for NaN/Inf, or lower the learning rate"
        )


def train_loop(
    model: nn.Module,
    teacher: nn.Module,
    calib: Calibration,
    options: TrainingOptions,
    optimizer: torch.optim.Optimizer | list[torch.optim.Optimizer],
    scheduler: torch.optim.lr_scheduler.LRScheduler | list[torch.optim.lr_scheduler.LRScheduler],
    loss_fn: LossFn,
    checkpoint: Checkpoint,
    device: torch.device,
    *,
    desc: str = "distill",
    before_step: Callable[[int], None] | None = None,
    after_step: Callable[[int], None] | None = None,
    channels_last: bool = False,
) -> LoopResult:
    """`options.iterations` steps of the student against the frozen teacher, resumed from `checkpoint`."""
    iterations, progress = options.iterations, options.progress
    optimizers = optimizer if isinstance(optimizer, list) else [optimizer]
    schedulers = scheduler if isinstance(scheduler, list) else [scheduler]
    result, elapsed_before = LoopResult(), 0.0
    state = checkpoint.load()
    if state is not None:
        model.load_state_dict(state["model"])
        teacher.load_state_dict(state["teacher"])
        for o, st in zip(optimizers, state["optimizers"]):
            o.load_state_dict(st)
        for sch, st in zip(schedulers, state["schedulers"]):
            sch.load_state_dict(st)
        result.history, elapsed_before = state["history"], state["elapsed_s"]
        result.resumed_from_step = state["step"]

    t0 = time.perf_counter()

    def save(step: int) -> None:
        checkpoint.save(
            {
                "step": step,
                "model": model.state_dict(),
                "teacher": teacher.state_dict(),
                "optimizers": [o.state_dict() for o in optimizers],
                "schedulers": [sch.state_dict() for sch in schedulers],
                "history": result.history,
                "elapsed_s": elapsed_before + time.perf_counter() - t0,
            },
            step,
            f"step {step}",
        )

    start = result.resumed_from_step
    model.train()
    bar = tqdm(
        range(start, iterations), initial=start, total=iterations, disable=not progress, desc=desc, dynamic_ncols=True
    )
    for step in bar:
        step_t0 = time.perf_counter()
        if before_step is not None:
            before_step(step)
        x = calib.batch(step).to(device)
        if channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            y_t = teacher(x)
        if step == start:
            _finite_or_raise(float(y_t.float().abs().sum()), "the dense teacher's output", step, desc)
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
        loss_value = loss.item()
        _finite_or_raise(loss_value, "the loss", step, desc)
        result.history.append(
            {
                "step": step,
                "loss": round(loss_value, 6),
                **{k: round(v, 8) for k, v in logs.items()},
                "lr": schedulers[0].get_last_lr()[0],
                "step_s": round(time.perf_counter() - step_t0, 5),
            }
        )
        if step % 10 == 0:
            bar.set_postfix({k: f"{v:.4g}" for k, v in logs.items()})
        if checkpoint.due(step + 1):
            save(step + 1)
    bar.close()
    if iterations > start and checkpoint.last_step != iterations:
        save(iterations)
    result.wall_s = elapsed_before + time.perf_counter() - t0
    return result
