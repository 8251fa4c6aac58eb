"""One checkpoint mechanism for every resumable run: a checkpoint carries the identity of the run that wrote it and
is resumed only by the same run; written atomically, read with `weights_only=True`."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .io import save_torch_atomic

log = logging.getLogger("fcpts")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: corrupt, unreadable, or written by another run."""


@dataclass
class Checkpoint:
    """`path` None: nothing is saved or resumed. Saves are due every `every_s` seconds or `every_steps` steps."""

    path: str | Path | None
    identity: dict
    every_s: float = 180.0
    every_steps: int | None = None
    label: str = "run"
    _last_time: float = field(default_factory=time.perf_counter, repr=False)
    last_step: int = field(default=0, repr=False)  # the step of the last save (or of the resumed state)

    def __post_init__(self) -> None:
        self.path = Path(self.path) if self.path else None
        self.key = hashlib.sha256(json.dumps(self.identity, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def load(self) -> dict | None:
        """The saved state of this run, or None when there is none. Logs what is resumed."""
        if self.path is None or not Path(self.path).exists():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any failure to read means the same thing to the user
            raise CheckpointError(
                f"checkpoint {self.path} is corrupt or unreadable ({type(e).__name__}: {str(e)[:200]}); "
                "delete it, or re-run with --force to start this cell clean"
            ) from None
        if not isinstance(state, dict) or state.get("identity_key") != self.key:
            raise CheckpointError(
                f"checkpoint {self.path} belongs to a different run (dense weights, options, calibration "
                "images or target differ); delete it, or re-run with --force to start this cell clean"
            )
        log.info("resuming %s from %s (%s)", self.label, state.get("progress", "a checkpoint"), self.path)
        self.last_step = int(state.get("step", 0))
        return state

    def due(self, step: int) -> bool:
        if self.path is None:
            return False
        if self.every_steps and step - self.last_step >= self.every_steps:
            return True
        return time.perf_counter() - self._last_time >= self.every_s

    def save(self, state: dict, step: int = 0, progress: str | None = None) -> None:
        """Write `state` (plus identity) atomically; `progress` says where it stands, e.g. 'step 400'."""
        if self.path is None:
            return
        save_torch_atomic(
            {
                "identity_key": self.key,
                "identity": json.dumps(self.identity, default=str),
                "progress": progress or f"step {step}",
                **state,
            },
            self.path,
        )
        self._last_time, self.last_step = time.perf_counter(), step
