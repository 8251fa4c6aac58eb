"""Calibration data as deterministic, resumable batches.

A step's batch depends only on (seed, step): the epoch's shuffle is seeded by (seed, epoch) and any
random transform in a Dataset runs under a forked RNG seeded by (seed, step). So a run restarted from
a checkpoint at step k sees exactly the batches it would have seen, and the caller's RNG is untouched.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.data import Dataset, Subset


class Calibration:
    def __init__(self, data: torch.Tensor | Dataset, batch_size: int, seed: int):
        if isinstance(data, torch.Tensor):
            if data.dim() < 2 or data.shape[0] == 0:
                raise ValueError(f"calibration tensor must be (N, ...) with N >= 1, got shape {tuple(data.shape)}")
        elif not hasattr(data, "__getitem__") or not hasattr(data, "__len__"):
            raise TypeError(f"calibration must be a tensor of inputs or a map-style Dataset, got {type(data).__name__}")
        if len(data) == 0:
            raise ValueError("calibration data is empty: pass at least one image")
        if isinstance(data, torch.Tensor):
            check_finite(data, "calibration images")
        self.data, self.seed = data, seed
        self.batch_size = min(batch_size, len(data))
        self.steps_per_epoch = len(data) // self.batch_size

    def __len__(self) -> int:
        return len(self.data)

    @property
    def indices(self) -> list[int]:
        """Indices into the underlying dataset (a Subset's own indices when given one)."""
        if isinstance(self.data, Subset):
            return [int(i) for i in self.data.indices]
        return list(range(len(self.data)))

    def _perm(self, epoch: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.data), generator=g)

    def order(self, epoch: int) -> list[int]:
        """The positions of the images in epoch `epoch`'s shuffle."""
        return self._perm(epoch).tolist()

    def batch(self, step: int) -> torch.Tensor:
        epoch, pos = divmod(step, self.steps_per_epoch)
        idx = self._perm(epoch)[pos * self.batch_size : (pos + 1) * self.batch_size]
        return self.take(idx.tolist(), seed=self.seed * 7_919 + step)

    def take(self, idx: list[int], seed: int = 0) -> torch.Tensor:
        if isinstance(self.data, torch.Tensor):
            if self.data.is_cuda:  # index on the device, so the index list is not a blocking copy
                return self.data[to_device(torch.tensor(idx), self.data.device)]
            return self.data[idx]
        with torch.random.fork_rng(devices=[]):  # transforms draw from the host RNG; a GPU's is left alone
            torch.default_generator.manual_seed(seed)
            items = [self.data[i] for i in idx]
        batch = torch.stack([it[0] if isinstance(it, (tuple, list)) else it for it in items])
        check_finite(batch, lambda: f"calibration images (dataset indices {self._bad_indices(batch, idx)})")
        return batch

    def _bad_indices(self, batch: torch.Tensor, idx: list[int]) -> str:
        """The dataset indices of the batch's images that hold NaN or Inf, in order (a batch is shuffled)."""
        bad = ~torch.isfinite(batch).flatten(1).all(1)
        found = sorted(self.indices[i] for i, b in zip(idx, bad.tolist()) if b)
        return ", ".join(map(str, found[:10])) + (f" and {len(found) - 10} more" if len(found) > 10 else "")


def to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host batch on `device` without making the host wait: to a GPU it goes from pinned memory,
    asynchronously (a plain `.to("cuda")` waits for the copy, and so for all work queued before it)."""
    if device.type != "cuda" or batch.is_cuda:
        return batch.to(device)
    return batch.pin_memory().to(device, non_blocking=True)


def check_finite(x: torch.Tensor, what: str | Callable[[], str]) -> None:
    """NaN or Inf in inputs would silently give a NaN model: stop before any work instead. `what` may be a
    function, so a batch's description is only built when it is needed."""
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        what = what() if callable(what) else what
        bad = int((~torch.isfinite(x)).flatten(1).any(1).sum()) if x.dim() > 1 else 1
        raise ValueError(
            f"{what} contain NaN or Inf values ({bad} of {len(x)} images); fix or drop those images before sparsifying"
        )
