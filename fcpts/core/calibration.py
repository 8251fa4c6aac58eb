"""Calibration data as deterministic, resumable batches: a step's batch (and any random transform, under a forked
RNG) depends only on (seed, step), so a resumed run sees the batches it would have seen."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sized
from contextlib import contextmanager
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    default_collate,
)


def _length(data: torch.Tensor | Dataset) -> int:
    """How many images `data` holds (Calibration keeps only a Dataset with a length)."""
    return len(cast(Sized, data))


class Calibration:
    def __init__(self, data: torch.Tensor | Dataset | DataLoader, batch_size: int, seed: int):
        data = calibration_data(data)
        if isinstance(data, torch.Tensor):
            if data.dim() < 2 or data.shape[0] == 0:
                raise ValueError(f"calibration tensor must be (N, ...) with N >= 1, got shape {tuple(data.shape)}")
            check_finite(data, "calibration images")
            check_not_raw_pixels(data, "the calibration tensor")
        elif not hasattr(data, "__getitem__") or not hasattr(data, "__len__"):
            raise TypeError(
                "calibration must be a tensor of inputs, a map-style Dataset or a DataLoader (of inputs or "
                f"(input, label) pairs), got {type(data).__name__}"
            )
        if _length(data) == 0:
            raise ValueError("calibration data is empty: pass at least one image")
        self.data, self.seed = data, seed
        self.batch_size = min(batch_size, _length(data))
        self.steps_per_epoch = _length(data) // self.batch_size

    def __len__(self) -> int:
        return _length(self.data)

    @property
    def indices(self) -> list[int]:
        """Indices into the underlying dataset (a Subset's own indices when given one)."""
        if isinstance(self.data, Subset):
            return [int(i) for i in self.data.indices]
        return list(range(_length(self.data)))

    def order(self, epoch: int) -> torch.Tensor:
        """The positions of the images in epoch `epoch`'s shuffle."""
        return torch.randperm(
            _length(self.data), generator=torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        )

    def batch(self, step: int) -> torch.Tensor:
        epoch, pos = divmod(step, self.steps_per_epoch)
        idx = self.order(epoch)[pos * self.batch_size : (pos + 1) * self.batch_size]
        return self.take(idx.tolist(), seed=self.seed * 7_919 + step)

    def in_order_batches(self, batch_size: int) -> int:
        """How many `in_order` batches of `batch_size` cover every image (the last one may be short)."""
        return -(-len(self) // batch_size)

    def in_order(self, b: int, batch_size: int) -> torch.Tensor:
        """The b-th batch of `batch_size` images in their order, unshuffled (the same one in every pass)."""
        i = b * batch_size
        return self.take(list(range(i, min(i + batch_size, len(self)))), seed=self.seed + i)

    def take(self, idx: list[int], seed: int = 0) -> torch.Tensor:
        if isinstance(self.data, torch.Tensor):
            if self.data.is_cuda:  # index on the device, so the index list is not a blocking copy
                return self.data[to_device(torch.tensor(idx), self.data.device)]
            return self.data[idx]
        with torch.random.fork_rng(devices=[]):  # transforms draw from the host RNG; a GPU's is left alone
            torch.default_generator.manual_seed(seed)
            items = [self.data[i] for i in idx]
        inputs = [it[0] if isinstance(it, (tuple, list)) else it for it in items]
        for i, x in zip(idx, inputs):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"calibration item {i} is a {type(x).__name__}: {_item_fix(x)}")
        batch = default_collate(inputs)  # torch.stack; in a worker process, straight into shared memory
        check_not_raw_pixels(batch, f"calibration item {idx[0]}")
        check_finite(batch, lambda: f"calibration images (dataset indices {self._bad_indices(batch, idx)})")
        return batch

    def _bad_indices(self, batch: torch.Tensor, idx: list[int]) -> str:
        """The dataset indices of the batch's images that hold NaN or Inf, in order (a batch is shuffled)."""
        bad = ~torch.isfinite(batch).flatten(1).all(1)
        found = sorted(self.indices[i] for i, b in zip(idx, bad.tolist()) if b)
        return ", ".join(map(str, found[:10])) + (f" and {len(found) - 10} more" if len(found) > 10 else "")


def _item_fix(item: Any) -> str:
    """What a calibration item must be, and how to get there from a dict of fields (Hugging Face's datasets)."""
    need = "a calibration Dataset must give input tensors or (input tensor, label) pairs"
    if isinstance(item, dict):
        tensors = {k: v.numel() for k, v in item.items() if isinstance(v, torch.Tensor)}
        key = max(tensors, key=tensors.__getitem__) if tensors else next(iter(item), "pixel_values")
        return (
            f"{need}; this one gives fields {sorted(map(str, item))}: pass the inputs alone, e.g. "
            f"[item[{key!r}] for item in dataset] (a list of tensors)"
        )
    return need


def calibration_data(data: torch.Tensor | Dataset | DataLoader) -> torch.Tensor | Dataset:
    """What the batches are drawn from: a DataLoader over a whole map-style Dataset gives that Dataset (batches
    depend on the run's seed, not the loader's), any other is read once into one tensor; an array is a tensor."""
    if isinstance(data, np.ndarray):
        return torch.as_tensor(data)
    if not isinstance(data, DataLoader):
        return data
    dataset, sampler = data.dataset, data.sampler
    whole = isinstance(sampler, SequentialSampler) or (
        isinstance(sampler, RandomSampler) and not sampler.replacement and sampler._num_samples is None
    )
    plain_batches = type(data.batch_sampler) is BatchSampler and data.batch_sampler.sampler is sampler
    if not isinstance(dataset, IterableDataset) and whole and plain_batches:
        return dataset
    batches = []
    for batch in data:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"the calibration DataLoader yields {type(x).__name__} inputs; it must yield tensors or "
                "(input tensor, label) pairs"
            )
        batches.append(x)
    if not batches:
        raise ValueError("calibration data is empty: the DataLoader yields no batch")
    return torch.cat(batches)


def to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host batch on `device` without making the host wait (to a GPU from pinned memory, asynchronously)."""
    if device.type != "cuda" or batch.is_cuda:
        return batch.to(device)
    return batch.pin_memory().to(device, non_blocking=True)


def check_input_dtype(data: torch.Tensor | Dataset, dtype: torch.dtype) -> None:
    """Float inputs in another dtype than the weights fail deep in the first layer: name the conversion first."""
    if isinstance(data, torch.Tensor) and data.is_floating_point() and data.dtype != dtype:
        raise TypeError(
            f"the calibration inputs are {data.dtype} and the model's weights {dtype}: give inputs of the weights' "
            f"dtype (x.to({dtype}); from NumPy, array.astype(numpy.{str(dtype).removeprefix('torch.')}))"
        )


def check_inputs_fit(model: torch.nn.Module, data: torch.Tensor | Dataset) -> None:
    """Run the model on the first input now (eval, no gradients, the user's forward hooks set aside unless it needs
    them), so inputs it cannot take fail before any work with their shape named."""
    if not isinstance(data, torch.Tensor) or data.dtype == torch.uint8:  # raw pixels: check_not_raw_pixels says
        return
    param = next(model.parameters(), None)
    one = data[:1].to(param.device) if param is not None else data[:1]
    modes = {m: m.training for m in model.modules()}
    try:
        with torch.no_grad():
            model.eval()
            try:
                with _forward_hooks_set_aside(model):
                    model(one)
            except (RuntimeError, ValueError, IndexError, TypeError):
                model(one)  # a model whose own hooks make it run: the complaint is the one it gives with them
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        reason = " ".join(str(e).split())[:300]
        raise ValueError(
            f"the calibration tensor of shape {tuple(data.shape)} ({data.dtype}) does not fit the model: its first "
            f"input, shape {tuple(one.shape)}, fails in the model's forward ({type(e).__name__}: {reason}); give "
            "(N, ...) inputs as the model takes them, e.g. (N, 3, H, W) images for an image model"
        ) from None
    finally:
        for m, training in modes.items():
            m.train(training)


@contextmanager
def _forward_hooks_set_aside(model: torch.nn.Module) -> Iterator[None]:
    """Every module's forward (pre-)hooks put aside for the block and put back after it, as they were."""
    kept = [(m, m._forward_pre_hooks, m._forward_hooks) for m in model.modules()]
    try:
        for m, _, _ in kept:
            m._forward_pre_hooks, m._forward_hooks = OrderedDict(), OrderedDict()
        yield
    finally:
        for m, pre, post in kept:
            m._forward_pre_hooks, m._forward_hooks = pre, post


def check_not_raw_pixels(x: torch.Tensor, what: str) -> None:
    """uint8 inputs are undecoded pixels, whose conversion no method should guess: name it."""
    if x.dtype == torch.uint8:
        raise TypeError(
            f"{what} is torch.uint8 (raw pixels): give the inputs the model was trained on, e.g. "
            "x.float() / 255 then its normalisation (torchvision: the weights' transforms(), or ToDtype(float32, "
            "scale=True) and Normalize)"
        )


def all_finite(x: torch.Tensor) -> bool:
    """Whether every element is finite, from one sum (NaN/Inf propagate; an overflow falls back to the element-wise
    test), cheaper than writing a mask as large as the batch."""
    return bool(torch.isfinite(x.sum())) or bool(torch.isfinite(x).all())


def check_finite(x: torch.Tensor, what: str | Callable[[], str]) -> None:
    """Refuse inputs holding NaN or Inf (they give a NaN model); `what` may be a function, called only then."""
    if x.is_floating_point() and not all_finite(x):
        what = what() if callable(what) else what
        bad = int((~torch.isfinite(x)).flatten(1).any(1).sum()) if x.dim() > 1 else 1
        raise ValueError(
            f"{what} contain NaN or Inf values ({bad} of {len(x)} images); fix or drop those images before sparsifying"
        )
