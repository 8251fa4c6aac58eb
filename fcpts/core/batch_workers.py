"""Calibration batches made by worker processes ahead of the steps that use them, so a GPU does not wait for the host
(a batch depends on (seed, step) alone: the result does not depend on the workers)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset

from .calibration import Calibration

log = logging.getLogger("fcpts")
MAX_DEFAULT_WORKERS = 8


def default_workers() -> int:
    """min(8, the CPUs this process may run on): enough to keep a GPU fed on typical transforms without taking a
    whole node."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(MAX_DEFAULT_WORKERS, usable)


def calibration_workers(asked: int | None, calib: Calibration, device: torch.device) -> int:
    """The workers a run's batches come from: `asked`, else `default_workers()` for host data on a GPU, none on a
    CPU or for a calibration tensor already on the device."""
    data_device = calib.data.device if isinstance(calib.data, torch.Tensor) else None  # None: a Dataset's items
    on_device = data_device is not None and data_device.type != "cpu"
    if asked is None:
        return default_workers() if device.type == "cuda" and not on_device else 0
    if asked > 0 and on_device:
        raise ValueError(
            f"calibration_workers={asked} asks for worker processes, but the calibration tensor is on "
            f"{data_device}, where workers cannot read it: pass it on the host, or calibration_workers=0"
        )
    return asked


class _StepBatch(Dataset):
    """Step -> (step, that step's batch): the step travels with its batch so the order can be checked."""

    def __init__(self, calib: Calibration):
        self.calib = calib

    def __getitem__(self, step: int) -> tuple[int, torch.Tensor]:
        return step, self.calib.batch(step)


class WorkerBatches:
    """step -> `calib.batch(step)`, made by `workers` processes for the steps `start`..`stop - 1` in order; after a
    step asked out of order or a failed worker, made here (so a batch's error is raised as itself)."""

    def __init__(self, calib: Calibration, start: int, stop: int, workers: int, pin: bool):
        self.calib, self.next_step = calib, start
        loader = DataLoader(
            _StepBatch(calib), batch_size=None, sampler=range(start, stop), num_workers=workers, pin_memory=pin
        )
        self.made: Iterator[tuple[int, torch.Tensor]] | None = iter(loader)

    def __call__(self, step: int) -> torch.Tensor:
        if self.made is not None and step != self.next_step:
            self.close()
        if self.made is not None:
            self.next_step += 1
            try:
                made_step, batch = next(self.made)
            except Exception as e:
                self.close()
                here = self.calib.batch(step)  # a batch's own error is raised here, as without workers
                log.warning(
                    "calibration batches: a worker process failed at step %d (%s: %s) where this process did not; "
                    "the batches are made in this process from here on (calibration_workers=0 does so from the "
                    "start)", step, type(e).__name__, str(e).splitlines()[0] if str(e) else "",
                )  # fmt: skip
                return here
            else:
                if made_step == step:
                    return batch
                self.close()
        return self.calib.batch(step)

    def close(self) -> None:
        """Stop the workers (the iterator's last reference goes, and its workers with it)."""
        self.made = None
