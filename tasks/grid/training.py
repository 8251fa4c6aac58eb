"""What the dense training recipes (tasks.cifar.train, tasks.voc.train) share: flags, batches, SGD with warm-up
then cosine, the recipe's fingerprint, resumable state, the epoch loop and the trained model's record."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from fcpts.core.checkpoint import Checkpoint
from tasks.grid.records import write_training_record


def epoch_steps(n_train: int, batch_size: int, epochs: int) -> tuple[int, int]:
    """(steps per epoch, total steps): whole batches only, so a set smaller than one batch is an error."""
    steps_per_epoch = n_train // batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"{n_train} training images make no full batch of {batch_size}")
    return steps_per_epoch, steps_per_epoch * epochs


def batch_indices(n_train: int, step: int, batch_size: int, seed: int) -> torch.Tensor:
    """A step's batch, a function of (seed, step) only: a resumed run draws the same batches."""
    epoch, pos = divmod(step, n_train // batch_size)
    perm = torch.randperm(n_train, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    return perm[pos * batch_size : (pos + 1) * batch_size]


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up from 0.1x to 1x over `warmup` steps, then cosine to zero at `total`."""
    if step < warmup:
        return 0.1 + 0.9 * step / max(1, warmup)
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def sgd_warmup_cosine(
    model: nn.Module, lr: float, weight_decay: float, warmup: int, total: int, nesterov: bool = False
) -> tuple[torch.optim.SGD, torch.optim.lr_scheduler.LambdaLR]:
    """SGD, momentum 0.9, weight decay on the weights only (not the 1-d ones), scaled by `lr_factor`."""
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.SGD(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        momentum=0.9,
        nesterov=nesterov,
    )
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, warmup, total))


def recipe_fingerprint(recipe: dict) -> str:
    """A short hash of the recipe: it names the checkpoint, so only the same recipe resumes it."""
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:16]


class TrainingState:
    """Resumable state of a training run through the suite's one checkpoint mechanism."""

    PARTS = ("model", "optimizer", "scheduler")

    def __init__(
        self,
        path: Path,
        fingerprint: str,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
    ):
        self.checkpoint = Checkpoint(path, {"recipe": fingerprint}, label=f"training {Path(path).stem}")
        self.path, self.model, self.optimizer, self.scheduler = path, model, optimizer, scheduler
        self.history: list[dict] = []
        self._elapsed_before = 0.0
        self._t0 = self._last_save = time.perf_counter()

    def start(self, total: int, steps_per_epoch: int) -> int:
        """Resume from the checkpoint when there is one, saying where; the step training goes on from."""
        state = self.checkpoint.load()
        if state is None:
            return 0
        for part in self.PARTS:
            getattr(self, part).load_state_dict(state[part])
        step, self.history, self._elapsed_before = state["step"], state["history"], state["elapsed_s"]
        self._t0 = self._last_save = time.perf_counter()
        print(f"resuming {self.path} at step {step}/{total} (epoch {step // steps_per_epoch})")
        return step

    def elapsed_s(self) -> float:
        return self._elapsed_before + time.perf_counter() - self._t0

    def save(self, step: int, every_s: float = 0.0) -> None:
        """Checkpoint the run after `step` optimiser steps, unless it was saved (or started) under `every_s` s ago."""
        if time.perf_counter() - self._last_save < every_s:
            return
        state = {part: getattr(self, part).state_dict() for part in self.PARTS}
        self.checkpoint.save({"step": step, **state, "history": self.history, "elapsed_s": self.elapsed_s()}, step)
        self._last_save = time.perf_counter()


def train_epochs(
    run: TrainingState,
    args: argparse.Namespace,
    steps_per_epoch: int,
    total: int,
    desc: str,
    *,
    batches: Callable[[int], Iterable],
    step_loss: Callable[[Any], tuple[torch.Tensor, torch.Tensor]],
    summary: Callable[[list[float], int], dict],
    test_at: Callable[[int], dict | None],
) -> float:
    """Train `run`'s model from its checkpoint to `total` steps on `step_loss(batch)` of `batches(start)`; each
    epoch appends `summary`, the rate, the time and `test_at(epoch)` to the history and checkpoints. Returns the
    training time."""
    model, sched = run.model, run.scheduler
    step = run.start(total, steps_per_epoch)
    bar = tqdm(total=total, initial=step, desc=desc, dynamic_ncols=True, disable=args.no_progress, mininterval=5)
    sums: torch.Tensor | int = 0
    seen = 0
    model.train()
    for batch in batches(step):
        loss, numbers = step_loss(batch)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        run.optimizer.step()
        sched.step()
        step += 1
        sums, seen = sums + numbers, seen + 1
        bar.update(1)
        if step % steps_per_epoch:  # mid-epoch: resumed here, only the epoch's running numbers restart
            run.save(step, args.checkpoint_every_s)
            continue
        epoch, stats = step // steps_per_epoch, summary(sums.tolist(), seen)
        bar.set_postfix(stats, refresh=False)
        entry = {
            "epoch": epoch,
            "step": step,
            **stats,
            "lr": sched.get_last_lr()[0],
            "elapsed_s": round(run.elapsed_s(), 1),
        }
        test = test_at(epoch)
        if test is not None:
            entry["test"] = test
            model.train()
        run.history.append(entry)
        sums, seen = 0, 0
        scalars = {f"test_{k}": v for k, v in (test or {}).items() if isinstance(v, (int, float))}
        print(json.dumps({k: v for k, v in entry.items() if k != "test"} | scalars), flush=True)
        run.save(step)
    bar.close()
    return run.elapsed_s()


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
    """The training record beside `weights`, and one line saying what was trained and its `score`."""
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
