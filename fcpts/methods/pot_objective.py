"""POT's per-layer objective: squared output error, summed over channels, averaged over the rest.

The error of a linear layer is linear in (W - W_dense, b - b_dense), so a batch's loss needs only each
image's input statistics: the Gram matrix of its patches (im2col columns) and their sum. Where those are
small (1x1 and depthwise convs at high resolution: EfficientNet/MobileNet's early layers), an iteration
costs a few small matrix products instead of three passes over 64 full feature maps, with the same
batches and the same loss up to float rounding. Elsewhere, or where a layer's forward is not linear in its
weight (checked on one image), the loss is computed from the layer's own forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call


def layer_output(layer: nn.Module, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The layer's own forward (padding of conv subclasses included) with other weight and bias."""
    return functional_call(layer, {"weight": weight, "bias": bias}, (x,))


def channel_dim(layer: nn.Module) -> int:
    return -1 if isinstance(layer, nn.Linear) else 1


def squared_error(layer: nn.Module, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (out - target).pow(2).sum(dim=channel_dim(layer)).mean()


class ForwardObjective:
    """The loss from the layer's forward on the cached inputs (any layer)."""

    def __init__(self, layer: nn.Module, inputs: torch.Tensor):
        self.layer, self.inputs = layer, inputs

    def __len__(self) -> int:
        return len(self.inputs)

    def loss(self, idx: torch.Tensor, weight, bias, w_dense, b_dense) -> torch.Tensor:
        x = self.inputs[idx]
        with torch.no_grad():
            target = layer_output(self.layer, x, w_dense, b_dense)
        return squared_error(self.layer, layer_output(self.layer, x, weight, bias), target)

    @torch.no_grad()
    def mean_error(self, weight, bias, w_dense, b_dense, chunk: int = 512) -> torch.Tensor:
        """Per output channel, mean of (dense - sparse) output over all images and positions."""
        dim = channel_dim(self.layer)
        total, count = torch.zeros_like(bias), 0
        for i in range(0, len(self.inputs), chunk):
            x = self.inputs[i : i + chunk]
            diff = layer_output(self.layer, x, w_dense, b_dense) - layer_output(self.layer, x, weight, bias)
            diff = diff.movedim(dim, -1).reshape(-1, diff.shape[dim])
            total += diff.sum(0)
            count += diff.shape[0]
        return total / count


class NotLinearInWeights(ValueError):
    """The layer's forward is not conv/linear in its weight (e.g. weight standardisation)."""


def gram_candidate(layer: nn.Module) -> bool:
    return isinstance(layer, (nn.Conv2d, nn.Linear)) and getattr(layer, "padding_mode", "zeros") == "zeros"


def _patches(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(n, groups, D, positions): the input columns each output position's dot product sees."""
    if isinstance(layer, nn.Linear):
        return x.reshape(x.shape[0], -1, x.shape[-1]).transpose(1, 2).unsqueeze(1)
    if type(layer) is nn.Conv2d and not isinstance(layer.padding, str):
        cols = F.unfold(x, layer.kernel_size, layer.dilation, layer.padding, layer.stride)
        return cols.view(x.shape[0], layer.groups, -1, cols.shape[-1])
    # A subclass (timm's Conv2dSame pads inside forward): its own forward with one-hot kernels
    g, (kh, kw) = layer.groups, layer.kernel_size
    d = layer.in_channels // g * kh * kw
    eye = torch.eye(d, dtype=x.dtype, device=x.device).view(d, -1, kh, kw).repeat(g, 1, 1, 1)
    cols = layer_output(layer, x, eye, torch.zeros(g * d, dtype=x.dtype, device=x.device))
    return cols.flatten(2).view(x.shape[0], g, d, -1)


def gram_plan(layer: nn.Module, sample: torch.Tensor, n_images: int, iterations: int, batch: int) -> dict:
    """Memory of the Gram statistics and rough CPU seconds of both objectives for a whole reconstruction.

    Both are mostly memory-bound on a CPU: a forward iteration moves the batch's inputs and four output-sized
    tensors, a Gram iteration gathers and sums the batch's Gram matrices, and the set-up unfolds every
    image once. The rates were measured on the 2-core reference machine (see the test and README); a wrong
    pick costs time, never accuracy.
    """
    p = _patches(layer, sample[:1])
    groups, d, positions = p.shape[1:]
    c_in, c_out = sample.shape[channel_dim(layer)], layer.weight.shape[0]
    forward_bytes = 4 * batch * positions * (c_in + 4 * c_out)
    forward_flops = 6 * batch * positions * c_out * d
    gram_bytes = 8 * batch * groups * d * d
    setup_bytes = 4 * n_images * groups * d * positions
    setup_flops = 2 * n_images * groups * d * d * positions
    return {
        "bytes": n_images * groups * d * (d + 1) * sample.element_size(),
        "forward_s": iterations * (forward_bytes / 1e9 + forward_flops / 1e11),
        "gram_s": iterations * gram_bytes / 2e9 + setup_bytes / 1e9 + setup_flops / 5e10,
    }


class GramObjective:
    """The same loss from per-image patch Gram matrices G_n = U_n U_n^T and sums s_n = U_n 1."""

    def __init__(self, layer: nn.Module, inputs: torch.Tensor, chunk: int = 64):
        if not gram_candidate(layer):
            raise NotLinearInWeights(f"{type(layer).__name__} is not a Conv2d/Linear with zero padding")
        self.layer = layer
        self._check_patches(inputs[:1])
        grams, sums = [], []
        with torch.no_grad():
            for i in range(0, len(inputs), chunk):
                u = _patches(layer, inputs[i : i + chunk])
                grams.append(u @ u.transpose(-1, -2))
                sums.append(u.sum(-1))
        self.grams, self.sums = torch.cat(grams), torch.cat(sums)  # (n, g, D, D), (n, g, D)
        self.positions = u.shape[-1]

    @torch.no_grad()
    def _check_patches(self, x: torch.Tensor) -> None:
        """The layer's forward must equal W @ patches + b, or the statistics would describe another loss."""
        u = _patches(self.layer, x)[0]  # (g, D, P)
        w = self.layer.weight.detach()
        bias = w.new_zeros(w.shape[0]) if self.layer.bias is None else self.layer.bias.detach()
        mine = torch.einsum("god,gdp->gop", w.reshape(u.shape[0], -1, u.shape[1]), u).reshape(w.shape[0], -1)
        ref = layer_output(self.layer, x, w, bias)
        ref = ref.movedim(channel_dim(self.layer), 1).reshape(w.shape[0], -1) - bias[:, None]
        if ref.shape != mine.shape or not torch.allclose(mine, ref, rtol=1e-4, atol=1e-5 * (ref.abs().max() + 1)):
            raise NotLinearInWeights(f"{type(self.layer).__name__}'s forward is not W @ patches + b")

    def __len__(self) -> int:
        return len(self.grams)

    def _deltas(self, weight, bias, w_dense, b_dense):
        g, d = self.grams.shape[1], self.grams.shape[2]
        dw = (weight - w_dense).reshape(g, -1, d)
        db = (bias - b_dense).reshape(g, -1)
        return dw, db

    def loss(self, idx: torch.Tensor, weight, bias, w_dense, b_dense) -> torch.Tensor:
        dw, db = self._deltas(weight, bias, w_dense, b_dense)
        gram, s = self.grams[idx].sum(0), self.sums[idx].sum(0)
        count = len(idx) * self.positions
        quad = torch.einsum("god,gde,goe->", dw, gram, dw)
        cross = 2 * torch.einsum("go,god,gd->", db, dw, s)
        return (quad + cross + count * db.pow(2).sum()) / count

    @torch.no_grad()
    def mean_error(self, weight, bias, w_dense, b_dense) -> torch.Tensor:
        dw, db = self._deltas(weight, bias, w_dense, b_dense)
        s = self.sums.sum(0)
        return -(torch.einsum("god,gd->go", dw, s) / (len(self) * self.positions) + db).reshape(-1)


class TargetObjective:
    """The loss against stored targets on other inputs: msbench's use_dense_inps=False, where a layer sees the
    sparse model's inputs (earlier layers already reconstructed) and must still match the dense outputs."""

    def __init__(self, layer: nn.Module, inputs: torch.Tensor, targets: torch.Tensor):
        self.layer, self.inputs, self.targets = layer, inputs, targets

    def __len__(self) -> int:
        return len(self.inputs)

    def loss(self, idx: torch.Tensor, weight, bias, w_dense=None, b_dense=None) -> torch.Tensor:
        return squared_error(self.layer, layer_output(self.layer, self.inputs[idx], weight, bias), self.targets[idx])


@torch.no_grad()
def full_loss(objective, weight, bias, w_dense, b_dense, chunk: int = 256) -> float:
    """The objective's loss over all its images (chunked, image-weighted)."""
    total, n = 0.0, len(objective)
    for i in range(0, n, chunk):
        idx = torch.arange(i, min(i + chunk, n))
        total += float(objective.loss(idx, weight, bias, w_dense, b_dense)) * len(idx)
    return total / n
