"""How strongly the blocks' MSE pulls on the weights against the output KL, measured before the first step, so their
balance is chosen rather than set by the network's activation scale and block count."""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable

import torch
from torch import nn

from fcpts.core.calibration import Calibration
from fcpts.core.loop import StepBatches, kl_distill

log = logging.getLogger("fcpts")
# the weight when one of the two gradients is zero and their ratio says nothing: the blocks as they come (FCPTS)
UNBALANCED_WEIGHT = 1.0


def _grads(loss: torch.Tensor, params: list[torch.Tensor], retain: bool) -> list[torch.Tensor]:
    grads = torch.autograd.grad(loss, params, retain_graph=retain, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]


def balanced_block_weight(
    student: nn.Module,
    teacher: nn.Module,
    calib: Calibration,
    student_blocks: dict[str, torch.Tensor],
    teacher_blocks: dict[str, torch.Tensor],
    params: list[torch.Tensor],
    *,
    temperature: float,
    balance: float,
    batches: int,
    device: torch.device,
    block_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    channels_last: bool = False,
) -> tuple[float, dict]:
    """The block weight w with ||grad(w * blocks' MSE)|| = balance * ||grad(KL)|| over the first `batches` calibration
    batches (UNBALANCED_WEIGHT where a gradient is zero), and what was measured; both models are left as they were."""
    t0 = time.perf_counter()
    saved = copy.deepcopy(student.state_dict()), copy.deepcopy(teacher.state_dict())
    was_training = student.training
    student.train()
    kl_sum = [torch.zeros_like(p) for p in params]
    block_sum = [torch.zeros_like(p) for p in params]
    steps = min(batches, max(1, calib.steps_per_epoch))
    batch_of = StepBatches(calib, device, channels_last)
    for step in range(steps):
        x = batch_of(step)  # as the loop will see it
        with torch.no_grad():
            y_t = teacher(x).float()
        y_s = student(x).float()
        kl = kl_distill(y_s, y_t, temperature)
        blocks = sum(block_loss(student_blocks[k], teacher_blocks[k]) for k in student_blocks)
        has_blocks = isinstance(blocks, torch.Tensor)  # no block found: no block term to weigh
        for acc, g in zip(kl_sum, _grads(kl, params, retain=has_blocks)):
            acc.add_(g)
        if isinstance(blocks, torch.Tensor):
            for acc, g in zip(block_sum, _grads(blocks, params, retain=False)):
                acc.add_(g)
    student.load_state_dict(saved[0])
    teacher.load_state_dict(saved[1])
    student.train(was_training)
    kl_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in kl_sum]))) / steps
    block_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in block_sum]))) / steps
    if not (math.isfinite(kl_norm) and math.isfinite(block_norm)):
        raise FloatingPointError(
            f"block balancing measured a non-finite gradient (KL {kl_norm:.3g}, blocks {block_norm:.3g}) on the "
            f"first {steps} calibration batches: check the calibration images and the dense model's outputs for "
            "NaN/Inf, or set block_weight to a number instead of 'auto'"
        )
    unbalanced = None
    if kl_norm > 0 and block_norm > 0:
        weight = balance * kl_norm / block_norm
    else:  # a zero gradient on one side (both: the student equals the teacher, e.g. nothing pruned yet)
        weight = UNBALANCED_WEIGHT
        unbalanced = "the blocks' gradient is zero" if kl_norm > 0 else "the output KL's gradient is zero"
        if not has_blocks:
            unbalanced = "the model has no block outputs to reconstruct"
        elif not (kl_norm > 0 or block_norm > 0):
            unbalanced = "both gradients are zero: the student equals the teacher on the probe batches"
        log.warning("block balancing: %s; block weight %g (FCPTS's) instead of a ratio", unbalanced, weight)
    return weight, {
        "chosen": weight,
        "balance": balance,
        "kl_grad_norm": kl_norm,
        "blocks_grad_norm": block_norm,
        "probe_batches": steps,
        "wall_s": round(time.perf_counter() - t0, 2),
        **({"unbalanced": unbalanced} if unbalanced else {}),
    }
