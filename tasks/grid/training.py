"""What the suite's dense training recipes (tasks.cifar.train, tasks.voc.train) share besides their
resumable state (training_state.py): the flags, the steps of an epoch, SGD with a warm-up then cosine schedule,
the fingerprint that names a recipe's checkpoint, the progress bar, the record of the trained model.

The recipes call these through the module (`training.add_args(p, ...)`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from tasks.grid.arg_types import above, at_least
from tasks.grid.help import add_device, add_results_dir
from tasks.grid.paths import RESULTS_DIR
from tasks.grid.records import write_training_record


def add_args(
    p: argparse.ArgumentParser,
    *,
    epochs: int,
    batch_size: int,
    eval_every: int,
    lr_help: str,
    epochs_help: str | None = None,
) -> None:
    """The flags every recipe has; a task gives its own defaults and adds its data and model flags."""
    p.add_argument("--epochs", type=at_least(int, 1), default=epochs, help=epochs_help)
    p.add_argument("--batch-size", type=at_least(int, 1), default=batch_size)
    p.add_argument("--lr", type=above(0.0), help=lr_help)
    p.add_argument("--weight-decay", type=at_least(float, 0.0), default=5e-4)
    p.add_argument("--seed", type=at_least(int, 0), default=0)
    p.add_argument(
        "--eval-every", type=at_least(int, 1), default=eval_every, help="epochs between test-set looks (reported only)"
    )
    p.add_argument("--train-limit", type=at_least(int, 1), help="use only the first N training images (tests)")
    p.add_argument("--eval-limit", type=at_least(int, 1), help="evaluate on the first N test images (tests)")
    add_results_dir(p, str(RESULTS_DIR / "weights"), "where the trained weights and their record go", "--out-dir")
    p.add_argument("--checkpoint-dir", default=str(RESULTS_DIR / "checkpoints"))
    p.add_argument("--checkpoint-every-s", type=above(0.0), default=180.0)
    add_device(p, "where the model trains")
    p.add_argument("--no-progress", action="store_true")


def epoch_steps(n_train: int, batch_size: int, epochs: int) -> tuple[int, int]:
    """(steps per epoch, total steps): whole batches only, so a set smaller than one batch is an error."""
    steps_per_epoch = n_train // batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"{n_train} training images make no full batch of {batch_size}")
    return steps_per_epoch, steps_per_epoch * epochs


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up from 0.1x to 1x over `warmup` steps, then cosine to zero at `total`."""
    if step < warmup:
        return 0.1 + 0.9 * step / max(1, warmup)
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def sgd_warmup_cosine(
    model: nn.Module, lr: float, weight_decay: float, warmup: int, total: int, nesterov: bool = False
) -> tuple[torch.optim.SGD, torch.optim.lr_scheduler.LambdaLR]:
    """SGD with momentum 0.9 and weight decay on the weights only (BN parameters and biases, the 1-d ones, get
    none), its rate scaled by `lr_factor` each step."""
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.SGD(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        momentum=0.9,
        nesterov=nesterov,
    )
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, warmup, total))


def sgd_step(loss: torch.Tensor, opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LRScheduler) -> None:
    """One step of `sgd_warmup_cosine`'s optimiser on `loss`, the schedule advanced with it."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()


def recipe_fingerprint(recipe: dict) -> str:
    """A short hash of everything that shapes the trained weights: it names the run's checkpoint, so only the
    same recipe resumes it."""
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:16]


def progress_bar(total: int, step: int, desc: str, disable: bool) -> tqdm:
    """The steps' progress, starting at `step` when a run resumes."""
    return tqdm(total=total, initial=step, desc=desc, dynamic_ncols=True, disable=disable, mininterval=5)


def write_record(
    weights: Path,
    trained: dict[str, Any],
    recipe: dict,
    final: dict,
    n_eval: int,
    history: list[dict],
    wall_s: float,
    where: dict[str, Any],
    score: str,
) -> dict:
    """The training record beside `weights`: what was `trained` (task, dataset, model), its recipe, the final test
    metrics on `n_eval` images, the history and training time, then `where` it ran; one line says what was
    trained and its `score`."""
    record = write_training_record(
        weights,
        {
            **trained,
            "recipe": recipe,
            "final_test": final,
            "n_eval": n_eval,
            "history": history,
            "wall_s": round(wall_s, 1),
            **where,
        },
    )
    label = f"{weights.parent.name}/{weights.stem}"  # <dataset>/<model>
    print(f"{label}: final test {score} after {recipe['epochs']} epochs, {wall_s / 60:.1f} min -> {weights}")
    return record
