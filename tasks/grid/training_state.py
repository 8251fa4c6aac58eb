"""Resumable state of a dense training run (model, optimiser, scheduler, step, history, elapsed time).

Shared by the suite's training recipes (tasks.cifar.train, tasks.voc.train), through the suite's one
checkpoint mechanism: saved atomically, resumed only by the run with the same recipe.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import nn

from fcpts.core.checkpoint import Checkpoint


class TrainingState:
    def __init__(
        self,
        path: Path,
        fingerprint: str,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
    ):
        self.checkpoint = Checkpoint(path, {"recipe": fingerprint}, label=f"training {Path(path).stem}")
        self.path, self.fingerprint = path, fingerprint
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.history: list[dict] = []
        self.step, self._elapsed_before = 0, 0.0
        self._t0 = self._last_save = time.perf_counter()

    def resume(self) -> bool:
        """Load the checkpoint when there is one; True when training continues from it."""
        state = self.checkpoint.load()
        if state is None:
            return False
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step, self.history, self._elapsed_before = state["step"], state["history"], state["elapsed_s"]
        self._t0 = self._last_save = time.perf_counter()
        return True

    def start(self, total: int, steps_per_epoch: int) -> int:
        """Resume from the checkpoint when there is one, saying where; the step training goes on from."""
        if self.resume():
            print(f"resuming {self.path} at step {self.step}/{total} (epoch {self.step // steps_per_epoch})")
        return self.step

    def elapsed_s(self) -> float:
        return self._elapsed_before + time.perf_counter() - self._t0

    def save(self, step: int) -> None:
        """Checkpoint the run as it stands after `step` optimiser steps."""
        self.step = step
        self.checkpoint.save(
            {
                "step": self.step,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "history": self.history,
                "elapsed_s": self.elapsed_s(),
            },
            step,
        )
        self._last_save = time.perf_counter()

    def save_if_due(self, step: int, every_s: float) -> None:
        """Checkpoint between epochs once `every_s` seconds have passed since the last save (or the start)."""
        if time.perf_counter() - self._last_save > every_s:
            self.save(step)
