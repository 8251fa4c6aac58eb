"""Several layers' weights as one flat tensor, each in its own memory order, and back: one kernel for all layers
instead of a few per layer, with the same values bit for bit."""

from __future__ import annotations

import torch

# Elements of one flat tensor at most (16 MB of float32): bounds what flattening adds to memory, and stays under
# glibc's mmap threshold, above which every allocation faults its pages afresh.
MAX_FLAT = 2**22


def runs_of(numels: list[int], limit: int | None = None) -> list[range]:
    """Consecutive runs of layers (by index) with at most `limit` (MAX_FLAT) elements between them (or one larger
    layer)."""
    limit = MAX_FLAT if limit is None else limit
    runs, start, size = [], 0, 0
    for i, n in enumerate(numels):
        if i > start and size + n > limit:
            runs.append(range(start, i))
            start, size = i, 0
        size += n
    return runs + [range(start, len(numels))] if numels else runs


def _memory_order(t: torch.Tensor) -> list[int]:
    """The permutation of `t`'s dims from the largest stride to the smallest: for a dense tensor, the one under
    which it is contiguous (NCHW for a contiguous conv weight, NHWC for a channels-last one)."""
    return sorted(range(t.dim()), key=lambda d: (-t.stride()[d], d))


class FlatLayout:
    """Where each of `weights` lies in their flat concatenation (each in its memory order at the time)."""

    def __init__(self, weights: list[torch.Tensor]):
        self.orders = [_memory_order(w) for w in weights]
        self.permuted_shapes = [[w.shape[d] for d in order] for w, order in zip(weights, self.orders)]
        self.inverses = [sorted(range(len(order)), key=order.__getitem__) for order in self.orders]
        self.numels = [w.numel() for w in weights]
        self.offsets = [sum(self.numels[:i]) for i in range(len(weights))]
        self.total = sum(self.numels)
        self._lengths: dict[torch.device, torch.Tensor] = {}

    def flatten(self, weights: list[torch.Tensor]) -> torch.Tensor:
        """One flat tensor of all `weights` (one copy, differentiable)."""
        return torch.cat([w.permute(order).reshape(-1) for w, order in zip(weights, self.orders)])

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Each weight's piece of a flat tensor, shaped (and strided) as the weight."""
        pieces = flat.split(self.numels)
        return [
            piece.view(shape).permute(inverse)
            for piece, shape, inverse in zip(pieces, self.permuted_shapes, self.inverses)
        ]

    def stds(self, flat: torch.Tensor) -> torch.Tensor:
        """Each weight's standard deviation (unbiased, as `Tensor.std`, summed in float64) from a flat tensor."""
        if flat.device not in self._lengths:  # made once (a step replayed from a CUDA graph cannot copy it there)
            self._lengths[flat.device] = torch.tensor(self.numels, device=flat.device)
        lengths = self._lengths[flat.device]
        values, count = flat.double(), lengths.double()
        # unsafe: the lengths are the layout's own, not checked against the flat size (a read-back on a GPU)
        mean = torch.segment_reduce(values, "sum", lengths=lengths, unsafe=True) / count
        values.sub_(mean.repeat_interleave(lengths, output_size=self.total)).square_()
        variance = torch.segment_reduce(values, "sum", lengths=lengths, unsafe=True) / (count - 1)
        return variance.sqrt_().to(flat.dtype)

    def per_element(self, values: torch.Tensor) -> torch.Tensor:
        """values (one per weight) repeated over each weight's elements: one copy, differentiable in `values`."""
        return torch.cat([values[i].expand(n) for i, n in enumerate(self.numels)])

    def positions(self, layer: int, logical: torch.Tensor) -> torch.Tensor:
        """The flat positions of weight `layer`'s elements at row-major (logical) indices `logical`."""
        shape = [self.permuted_shapes[layer][i] for i in self.inverses[layer]]
        strides = torch.empty(self.permuted_shapes[layer], device="meta").permute(self.inverses[layer]).stride()
        position = torch.full_like(logical, self.offsets[layer])
        for index, stride in zip(torch.unravel_index(logical, shape), strides):
            position += index * stride
        return position
