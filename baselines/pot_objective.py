"""POT's per-layer objective: squared output error, summed over channels, averaged over the rest. A linear layer's
error is linear in (W - W_dense, b - b_dense), so a batch's loss needs only the Gram matrix of its input patches and
their sum (the same loss up to rounding, a few small products a step); else it comes from the layer's forward."""

from __future__ import annotations

from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fcpts.core.masks import layer_bias, layer_weight

RECOMPUTED_READ = 64  # images per read where a pass over all images recomputes their inputs


class ImageInputs(Protocol):
    """What an objective reads per image: a tensor over the images, or POT's inputs recomputed on every read."""

    def __getitem__(self, idx: Any) -> torch.Tensor: ...

    def __len__(self) -> int: ...


def layer_output(layer: nn.Module, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The layer's own forward (padding of conv subclasses included) with other weight and bias."""
    return functional_call(layer, {"weight": weight, "bias": bias}, (x,))


def channel_dim(layer: nn.Module) -> int:
    return -1 if isinstance(layer, nn.Linear) else 1


class _Units:
    """The images an objective sums over, grouped into units (single images, or POT's fixed batches)."""

    units: torch.Tensor | None  # (k, m) image indices per unit; None: each image is a unit

    def __len__(self) -> int:
        raise NotImplementedError

    def loss(self, idx: torch.Tensor, weight, bias, w_dense, b_dense) -> torch.Tensor:
        raise NotImplementedError

    def _images(self, idx: torch.Tensor) -> torch.Tensor:
        return idx if self.units is None else self.units[idx].flatten()

    def _per_read(self, cached: int) -> int:
        """Units per read in a pass over all of them: `cached`, or RECOMPUTED_READ images of recomputed inputs."""
        if isinstance(getattr(self, "inputs", None), torch.Tensor):
            return cached
        return max(1, RECOMPUTED_READ // (1 if self.units is None else self.units.shape[1]))

    @torch.no_grad()
    def full_loss(self, weight, bias, w_dense, b_dense, chunk: int = 256) -> float:
        """The loss over all units (chunked, unit-weighted)."""
        n = len(self)
        chunk = self._per_read(chunk)
        total = torch.zeros((), dtype=torch.float64, device=weight.device)  # read back once, at the end
        for i in range(0, n, chunk):
            idx = torch.arange(i, min(i + chunk, n), device=weight.device)
            total += self.loss(idx, weight, bias, w_dense, b_dense).double() * len(idx)
        return float(total) / n


class ForwardObjective(_Units):
    """The loss from the layer's forward on the cached inputs (any layer)."""

    def __init__(self, layer: nn.Module, inputs: ImageInputs, units: torch.Tensor | None = None):
        self.layer, self.inputs, self.units = layer, inputs, units

    def __len__(self) -> int:
        return len(self.inputs) if self.units is None else len(self.units)

    def loss(self, idx: torch.Tensor, weight, bias, w_dense, b_dense) -> torch.Tensor:
        x = self.inputs[self._images(idx)]
        with torch.no_grad():
            target = layer_output(self.layer, x, w_dense, b_dense)
        return (layer_output(self.layer, x, weight, bias) - target).pow(2).sum(dim=channel_dim(self.layer)).mean()

    @torch.no_grad()
    def mean_error(self, weight, bias, w_dense, b_dense, chunk: int = 512) -> torch.Tensor:
        """Per output channel, mean of (dense - sparse) output over the units' images and positions."""
        dim = channel_dim(self.layer)
        images = self._images(torch.arange(len(self), device=bias.device))
        chunk = chunk if isinstance(self.inputs, torch.Tensor) else RECOMPUTED_READ
        total, count = torch.zeros_like(bias), 0
        for i in range(0, len(images), chunk):
            x = self.inputs[images[i : i + chunk]]
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
    conv = cast(nn.Conv2d, layer)  # prunable layers are Conv2d or Linear, and Linear returned above
    g, (kh, kw) = conv.groups, conv.kernel_size
    d = conv.in_channels // g * kh * kw
    eye = torch.eye(d, dtype=x.dtype, device=x.device).view(d, -1, kh, kw).repeat(g, 1, 1, 1)
    cols = layer_output(layer, x, eye, torch.zeros(g * d, dtype=x.dtype, device=x.device))
    return cols.flatten(2).view(x.shape[0], g, d, -1)


def gram_plan(
    layer: nn.Module,
    sample: torch.Tensor,
    n_images: int,
    iterations: int,
    batch: int,
    unit_size: int = 1,
    gradient: str = "autograd",
) -> dict:
    """Memory of the Gram statistics and rough CPU seconds of both objectives for a whole reconstruction, with
    `unit_size` images sharing one set of statistics; a wrong pick costs time, never accuracy."""
    p = _patches(layer, sample[:1])
    groups, d, positions = p.shape[1:]
    c_in, c_out = sample.shape[channel_dim(layer)], layer_weight(layer).shape[0]
    forward_bytes = 4 * batch * positions * (c_in + 4 * c_out)
    forward_flops = 6 * batch * positions * c_out * d
    closed_form = gradient == "closed-form"
    gram_bytes = (4 if closed_form else 8) * max(1, batch // unit_size) * groups * d * d
    gram_flops = 2 * c_out * d * d if closed_form else 0  # the product of the weight change with the Gram matrix
    setup_bytes = 4 * n_images * groups * d * positions
    setup_flops = 2 * n_images * groups * d * d * positions
    return {
        "bytes": max(1, n_images // unit_size) * groups * d * (d + 1) * sample.element_size(),
        "forward_s": iterations * (forward_bytes / 1e9 + forward_flops / 1e11),
        "gram_s": iterations * (gram_bytes / 2e9 + gram_flops / 1e11) + setup_bytes / 1e9 + setup_flops / 5e10,
    }


def gram_loss(dw, db, gram, s, count) -> torch.Tensor:
    """(dW G dW^T + 2 db dW s + count |db|^2) / count per leading index: the squared output error of a weight
    and bias change (dw: (..., g, o, D), db: (..., g, o)) on inputs with patch Gram G and patch sum s."""
    quad = torch.einsum("...god,...gde,...goe->...", dw, gram, dw)
    cross = 2 * torch.einsum("...go,...god,...gd->...", db, dw, s)
    return (quad + cross + count * db.pow(2).sum((-1, -2))) / count


def batch_gram(u: torch.Tensor) -> torch.Tensor:
    """(g, D, D) sum of the images' patch Gram matrices, u: (m, g, D, P), in the faster order for its shape."""
    if u.shape[2] < u.shape[3]:
        return (u @ u.transpose(-1, -2)).sum(0)
    v = u.permute(1, 2, 0, 3).flatten(2)  # (g, D, m * P)
    return v @ v.transpose(-1, -2)


class GramObjective(_Units):
    """The same loss from patch Gram matrices G = U U^T and sums s = U 1, one pair per unit."""

    def __init__(self, layer: nn.Module, inputs: ImageInputs, units: torch.Tensor | None = None, chunk: int = 64):
        if not gram_candidate(layer):
            raise NotLinearInWeights(f"{type(layer).__name__} is not a Conv2d/Linear with zero padding")
        self.layer, self.units = layer, units
        self._check_patches(inputs[:1])
        grams, sums = [], []
        with torch.no_grad():
            if units is None:
                for i in range(0, len(inputs), chunk):
                    u = _patches(layer, inputs[i : i + chunk])
                    grams.append(u @ u.transpose(-1, -2))
                    sums.append(u.sum(-1))
            else:
                for images in units:
                    u = _patches(layer, inputs[images])  # (m, g, D, P)
                    grams.append(batch_gram(u)[None])
                    sums.append(u.sum((0, -1))[None])
        self.grams, self.sums = torch.cat(grams), torch.cat(sums)  # (k, g, D, D), (k, g, D)
        self.positions = u.shape[-1]
        self.unit_size = 1 if units is None else units.shape[1]

    @torch.no_grad()
    def _check_patches(self, x: torch.Tensor) -> None:
        """The layer's forward must equal W @ patches + b, or the statistics would describe another loss."""
        u = _patches(self.layer, x)[0]  # (g, D, P)
        w = layer_weight(self.layer).detach()
        b = layer_bias(self.layer)
        bias = w.new_zeros(w.shape[0]) if b is None else b.detach()
        mine = torch.einsum("god,gdp->gop", w.reshape(u.shape[0], -1, u.shape[1]), u).reshape(w.shape[0], -1)
        ref = layer_output(self.layer, x, w, bias)
        ref = ref.movedim(channel_dim(self.layer), 1).reshape(w.shape[0], -1) - bias[:, None]
        if ref.shape != mine.shape or not torch.allclose(
            mine, ref, rtol=1e-4, atol=float(1e-5 * (ref.abs().max() + 1))
        ):
            raise NotLinearInWeights(f"{type(self.layer).__name__}'s forward is not W @ patches + b")

    def __len__(self) -> int:
        return len(self.grams)

    def deltas(self, weight, bias, w_dense, b_dense):
        """Weight and bias changes shaped (..., g, o, D) and (..., g, o); leading dims are stacked layers."""
        g, d = self.grams.shape[-3], self.grams.shape[-1]
        lead = weight.shape[: weight.dim() - self.layer.weight.dim()]
        return (weight - w_dense).reshape(*lead, g, -1, d), (bias - b_dense).reshape(*lead, g, -1)

    def count(self, units: int) -> int:
        return units * self.unit_size * self.positions

    def loss(self, idx: torch.Tensor, weight, bias, w_dense, b_dense) -> torch.Tensor:
        dw, db = self.deltas(weight, bias, w_dense, b_dense)
        return gram_loss(dw, db, self.grams[idx].sum(0), self.sums[idx].sum(0), self.count(len(idx)))

    @torch.no_grad()
    def full_loss(self, weight, bias, w_dense, b_dense, chunk: int = 0) -> float:
        dw, db = self.deltas(weight, bias, w_dense, b_dense)
        return float(gram_loss(dw, db, self.grams.sum(0), self.sums.sum(0), self.count(len(self))))

    @torch.no_grad()
    def mean_error(self, weight, bias, w_dense, b_dense) -> torch.Tensor:
        dw, db = self.deltas(weight, bias, w_dense, b_dense)
        s = self.sums.sum(0)
        return -(torch.einsum("god,gd->go", dw, s) / self.count(len(self)) + db).reshape(-1)


def stack_signature(objective) -> tuple | None:
    """Objectives with equal signatures can be optimised as one stacked problem (GramStack)."""
    if not isinstance(objective, GramObjective):
        return None
    return (tuple(objective.grams.shape), objective.unit_size, objective.positions, objective.grams.dtype)


class GramStack:
    """L Gram objectives of one signature as one problem, weights stacked (L, ...); the losses are independent."""

    def __init__(self, objectives: list[GramObjective]):
        self.first = objectives[0]
        self.grams = torch.stack([o.grams for o in objectives])  # (L, k, g, D, D)
        self.sums = torch.stack([o.sums for o in objectives])
        for i, o in enumerate(objectives):  # the objectives read the stacked copy: the statistics are held once
            o.grams, o.sums = self.grams[i], self.sums[i]
        self.rows = torch.arange(len(objectives), device=self.grams.device)[:, None]

    def losses(self, sel: torch.Tensor, weight, bias, w_dense, b_dense) -> torch.Tensor:
        """sel: (L, m) unit indices per layer; returns the L losses."""
        dw, db = self.first.deltas(weight, bias, w_dense, b_dense)
        return gram_loss(dw, db, *self._summed(sel), self.first.count(sel.shape[1]))

    def _summed(self, sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per layer, the Gram matrices and sums of its selected units, summed."""
        return self.grams[self.rows, sel].sum(1), self.sums[self.rows, sel].sum(1)

    @torch.no_grad()
    def losses_and_gradients(self, sel: torch.Tensor, weight, bias, w_dense, b_dense) -> torch.Tensor:
        """The L losses of `losses`, their gradients written to weight.grad and bias.grad in closed form:
        2 (dW G + db s^T) / count and 2 (dW s + count db) / count (one product with each Gram matrix)."""
        dw, db = self.first.deltas(weight, bias, w_dense, b_dense)  # (L, g, o, D), (L, g, o)
        if sel.shape[1] == 1:  # POT's fixed batches: one unit a step, read without a sum
            gram, s = self.grams[self.rows[:, 0], sel[:, 0]], self.sums[self.rows[:, 0], sel[:, 0]]
        else:
            gram, s = self._summed(sel)
        count = self.first.count(sel.shape[1])
        product = dw @ gram  # dW G
        moved = (dw @ s.unsqueeze(-1)).squeeze(-1)  # dW s
        quad = torch.linalg.vecdot(product.flatten(1), dw.flatten(1))
        losses = quad + 2 * torch.linalg.vecdot(db.flatten(1), moved.flatten(1)) + count * db.pow(2).sum((-1, -2))
        weight.grad = torch.addcmul(product, db.unsqueeze(-1), s.unsqueeze(-2)).mul_(2 / count).view_as(weight)
        bias.grad = moved.add_(db, alpha=count).mul_(2 / count).view_as(bias)
        return losses / count
