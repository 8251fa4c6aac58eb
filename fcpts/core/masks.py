"""Which layers are prunable, the threshold mask, and sparsity accounting.

These are the sparsity tools shared by FCPTS and every baseline: a layer list, a mask that is a
step function of |W| with a straight-through gradient, and exact counting of zeros.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

PRUNABLE_TYPES: tuple[type[nn.Module], ...] = (nn.Conv2d, nn.Linear)


class NoPrunableLayersError(ValueError):
    """Raised when a model has no Conv2d/Linear layer left to prune."""


def prunable_layers(
    model: nn.Module, exclude: Iterable[str] = (), filter_fn: Callable[[nn.Module, str], bool] | None = None
) -> dict[str, nn.Module]:
    """Every Conv2d and Linear of `model` by qualified name, minus `exclude` (kept dense) and minus those
    for which `filter_fn(module, name)` is False (torchao's convention).

    The first conv, depthwise convs, 1x1 downsamples and the classifier are all included by default, as in
    the released code and msbench. Raises a clear error when nothing is left to prune.
    """
    exclude = set(exclude)
    names = {name for name, module in model.named_modules() if isinstance(module, PRUNABLE_TYPES)}
    unknown = exclude - names
    if unknown:
        raise ValueError(
            f"exclude names {sorted(unknown)} are not Conv2d/Linear layers of this model; "
            f"prunable layers are e.g. {sorted(names)[:5]}"
        )
    layers = {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, PRUNABLE_TYPES) and name not in exclude and (filter_fn is None or filter_fn(module, name))
    }
    if not layers:
        left_out = "after excluding " + str(sorted(exclude)) if exclude else ""
        left_out += " and filter_fn" if filter_fn is not None else ""
        raise NoPrunableLayersError(
            f"{type(model).__name__} has no prunable layers (nn.Conv2d / nn.Linear) {left_out}; "
            "pass a model that contains convolutions or linear layers"
        )
    return layers


class Sparsity(float):
    """A global sparsity target that has been checked: a fraction of zero weights in [0, 1).

    Why a type: a target passes through the command line, the grid, the method and the allocation on its way to
    the masks; each of them accepts a plain number and checks it, and a `Sparsity` it passes on unchecked, so a
    target is checked once, where it enters. Arithmetic on it gives plain floats, as before."""

    __slots__ = ()

    def __new__(cls, target: float) -> Sparsity:
        if isinstance(target, bool) or not isinstance(target, (int, float)):
            raise TypeError(f"target sparsity must be a number in [0, 1), got {target!r}")
        if not 0.0 <= float(target) < 1.0:
            raise ValueError(
                f"target sparsity must be in [0, 1) (a fraction of zero weights, e.g. 0.9 for 90%), got {target}"
            )
        return super().__new__(cls, target)


def check_target(target: float) -> Sparsity:
    """A global sparsity target as a checked `Sparsity`: one already checked as it is, a number checked now."""
    return target if isinstance(target, Sparsity) else Sparsity(target)


class _BinActive(torch.autograd.Function):
    """sgn(x) forward; hard-tanh straight-through gradient (1 inside |x| < 1, else 0) backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * (x.abs() < 1).to(grad.dtype)


def threshold_mask(weight: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """M = 0.5 * sgn(|W| - t) + 0.5 (paper Eq. 1), with a straight-through gradient into t.

    Weights exactly at the threshold get 0.5 from sgn(0) = 0; `hard_mask` resolves ties as kept.
    Only the threshold receives gradient: |W| is detached, so the mask never moves weights.
    """
    return 0.5 * _BinActive.apply(weight.detach().abs() - threshold) + 0.5


def hard_mask(weight: torch.Tensor, threshold: torch.Tensor | float) -> torch.Tensor:
    """The boolean keep-mask |W| >= t, matching the bridge function's count of |W| < t as pruned."""
    return weight.abs() >= threshold


def layer_sparsity(weight: torch.Tensor) -> float:
    """Fraction of exact zeros in a weight tensor."""
    return float((weight == 0).sum().item()) / weight.numel()


def sparsity_summary(
    model: nn.Module, exclude: Iterable[str] = (), filter_fn: Callable[[nn.Module, str], bool] | None = None
) -> tuple[float, list[dict]]:
    """Global sparsity (zeros / all prunable weights) and a per-layer list (name, numel, sparsity).

    Biases and BN parameters are not counted, as in METHOD.md.
    """
    layers = prunable_layers(model, exclude, filter_fn)
    zeros = total = 0
    per_layer = []
    for name, module in layers.items():
        w = module.weight.detach()
        z = int((w == 0).sum().item())
        zeros += z
        total += w.numel()
        per_layer.append({"name": name, "numel": w.numel(), "sparsity": z / w.numel()})
    return zeros / total, per_layer


@torch.no_grad()
def apply_keep_masks(layers: dict[str, nn.Module], masks: dict[str, torch.Tensor]) -> None:
    """Zero the weights outside each boolean keep-mask, in place."""
    for name, module in layers.items():
        module.weight.mul_(masks[name].to(module.weight.dtype))
