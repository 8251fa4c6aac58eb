"""ProbMask (Zhou et al. 2021) under the post-training budget (docs/METHOD.md): a keep-probability per weight trained
through a binary-concrete mask and projected onto a kept-fraction schedule; exported as exactly the highest scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from fcpts.core.allocation import global_keep_masks
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
from fcpts.core.masks import apply_keep_masks, layer_weight, parametrize_weights, unparametrize_weights
from fcpts.core.options import TrainingOptions, check_at_least, check_choice, fitted_iterations, open_run
from fcpts.core.report import SparsityReport, loop_report
from fcpts.methods.registry import PAPER_BASELINE, Method, register

from .score_projection import PROJECTIONS


@dataclass
class ProbMaskOptions(TrainingOptions):
    score_lr: float = 6e-3  # Adam on scores; weights use the shared SGD settings
    t_start: float = 1.0
    t_end: float = 33.0
    schedule_fraction: float = 0.75  # kept fraction reaches 1 - target after this share of steps
    projection: str = "binned"  # how v is found each step (baselines/score_projection.py): "binned" or "bisection"

    DEFAULTS_BEFORE: ClassVar[dict[str, Any]] = {"projection": "bisection"}  # what records before it ran with

    def validate(self) -> None:
        super().validate()
        for name in ("score_lr", "t_start", "t_end"):
            check_at_least(self, name, 0.0, inclusive=False)
        if not 0 < self.schedule_fraction <= 1:
            raise ValueError(f"option schedule_fraction must lie in (0, 1], got {self.schedule_fraction!r}")
        check_choice(self, "projection", tuple(PROJECTIONS))


EPS = 1e-6  # scores and noise are kept this far from 0 and 1, where the logit is infinite
# A mask this small is zero: denormal weights run the CPU's convolutions several times slower, for nothing.
NEGLIGIBLE_MASK = 1e-20


def relaxed_masked_weight(weight: torch.Tensor, scores: torch.Tensor, u: torch.Tensor, inv_t: float) -> torch.Tensor:
    """W * sigmoid((logit(s) + logit(u)) * T): the binary-concrete sample applied to the weight."""
    s = scores.clamp(EPS, 1 - EPS)
    logits = torch.log(s) - torch.log1p(-s) + torch.log(u) - torch.log1p(-u)
    mask = torch.sigmoid(logits * inv_t)
    return weight * mask.masked_fill(mask < NEGLIGIBLE_MASK, 0.0)


def drawn_masked_weight(
    weight: torch.Tensor, scores: torch.Tensor, noise: torch.Generator, state: torch.Tensor, inv_t: float
) -> torch.Tensor:
    """relaxed_masked_weight with u drawn from `noise` set to `state`: the same u each time it is called."""
    noise.set_state(state)
    return relaxed_masked_weight(weight, scores, uniform_noise(scores, noise), inv_t)


def uniform_noise(scores: torch.Tensor, noise: torch.Generator | None) -> torch.Tensor:
    u = torch.rand(scores.shape, generator=noise, device=scores.device, dtype=scores.dtype)
    return u.clamp_(EPS, 1 - EPS)


class ProbMaskParam(nn.Module):
    """Parametrization W -> W * m(s): relaxed Bernoulli sample from `noise` while training, hard s > 0.5 in eval.
    The sample and its noise are recomputed in the backward (from the generator's state), not kept: same values."""

    def __init__(self, shape: torch.Size, noise: torch.Generator | None = None):
        super().__init__()
        self.scores = nn.Parameter(torch.ones(shape))
        self.inv_temperature = 1.0
        self.noise = noise

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return weight * (self.scores > 0.5).to(weight.dtype)
        s, t = self.scores, self.inv_temperature
        if not torch.is_grad_enabled():
            return relaxed_masked_weight(weight, s, uniform_noise(s, self.noise), t)
        if self.noise is None:  # the global generator's draw cannot be repeated here: u is kept
            return checkpoint(relaxed_masked_weight, weight, s, uniform_noise(s, None), t, use_reentrant=False)
        state = self.noise.get_state()
        return checkpoint(drawn_masked_weight, weight, s, self.noise, state, t, use_reentrant=False)


def kept_fraction(step: int, iterations: int, target: float, schedule_fraction: float) -> float:
    """Cubic schedule: 1 at step 0, 1 - target from schedule_fraction * iterations on."""
    span = max(1, round(schedule_fraction * iterations))
    progress = min(1.0, (step + 1) / span)
    return (1 - target) + target * (1 - progress) ** 3


@torch.no_grad()
def export_masks(scores: dict[str, torch.Tensor], weights: dict[str, torch.Tensor], target: float) -> dict:
    """Keep the round((1 - target) * N) highest scores, equal ones by |W|; a weight already zero goes first."""
    magnitudes = {n: w.detach().abs() for n, w in weights.items()}
    ranked = {n: torch.where(magnitudes[n] == 0, torch.full_like(s, -1.0), s) for n, s in scores.items()}
    return global_keep_masks(ranked, target, tiebreak=magnitudes)


def probmask_sparsify(
    model: nn.Module, calibration, target: float, options: ProbMaskOptions
) -> tuple[nn.Module, SparsityReport]:
    """ProbMask under the post-training budget, exported deterministically at exactly the target."""
    target, device, layers, _ = setup = open_run(model, calibration, target, options)
    calib = setup.required_calib()
    final_scores, loop = train_scores(model, layers, calib, target, device, options)
    apply_keep_masks(layers, export_masks(final_scores, {n: layer_weight(m) for n, m in layers.items()}, target))
    model.eval()
    n_scores = sum(s.numel() for s in final_scores.values())
    hard = sum(int((s > 0.5).sum()) for s in final_scores.values()) / n_scores
    # Scores still far from 0 and 1 mean the masks never settled: the export then ranks near-equal scores.
    undecided = sum(int(((s > 0.05) & (s < 0.95)).sum()) for s in final_scores.values()) / n_scores
    extra = {"kept_fraction_by_s_gt_half": hard, "scores_undecided_fraction": undecided}
    return model, loop_report("probmask", target, model, options, calib, loop, extra)


def train_scores(
    model: nn.Module, layers: dict[str, nn.Module], calib, target: float, device, options: ProbMaskOptions
) -> tuple[dict[str, torch.Tensor], LoopResult]:
    """Weights and scores trained together; each layer's final scores, the layers plain again (and the training
    state gone before the export)."""
    identity = run_identity(target, options, calib, model)
    teacher = frozen_teacher(model, options.teacher_mode)
    noise = torch.Generator(device=device)
    params = parametrize_weights(layers, lambda _, module: ProbMaskParam(layer_weight(module).shape, noise).to(device))
    scores: list[torch.Tensor] = [p.scores for p in params.values()]
    ids = {id(s) for s in scores}
    weights = [p for p in model.parameters() if id(p) not in ids]
    lr = options.resolved_lr(calib.batch_size)
    sgd = torch.optim.SGD(weights, lr=lr, momentum=options.momentum, weight_decay=options.weight_decay)
    adam = torch.optim.Adam(scores, lr=options.score_lr)
    iterations = fitted_iterations(options.iterations)
    scheds, _ = lr_schedulers(options, calib, sgd, adam)

    def before(step: int) -> None:
        noise.manual_seed(options.seed * 1_000_003 + 500_009 + step)  # (seed, step) alone: resumable
        inv_t = options.t_start * (options.t_end / options.t_start) ** (step / max(1, iterations - 1))
        for p in params.values():
            p.inv_temperature = inv_t

    project_scores = PROJECTIONS[options.projection]

    def after(step: int) -> None:
        project_scores(scores, kept_fraction(step, iterations, target, options.schedule_fraction))

    checkpoint = run_checkpoint(options, identity, f"probmask {target:.2%}")
    loop = train_loop(
        model,
        teacher,
        StepBatches(calib, device),
        options,
        scheds,
        kl_loss(options.temperature),
        checkpoint,
        desc=f"probmask {target:.2f}",
        before_step=before,
        after_step=after,
    )
    final_scores = {n: p.scores.detach() for n, p in params.items()}
    unparametrize_weights(layers)
    return final_scores, loop


register(
    Method(
        "probmask",
        "ProbMask",
        probmask_sparsify,
        ProbMaskOptions,
        role=PAPER_BASELINE,
        style=("tab:purple", "v"),
        summary="ProbMask with global projection and a deterministic exact export",
    )
)
