"""Whether each layer computes with the weight it stores, so that the zeros a method stores are zeros it computes with:
a layer whose forward remakes its weight (prune, weight_norm, parametrizations) or transforms it (timm's StdConv2d)
is refused before any work.
"""

from __future__ import annotations

import copy
from typing import cast

import torch
from torch import nn
from torch.nn.utils import parametrize, prune
from torch.nn.utils.spectral_norm import SpectralNorm
from torch.nn.utils.weight_norm import WeightNorm

from fcpts.core.masks import PRUNABLE_TYPES, weight_parametrizations


def check_stored_weights(model: nn.Module) -> None:
    """Refuse a Conv2d/Linear whose forward remakes its weight, chosen or not (excluded, the older hook-made ones
    still break the copy a method takes), naming the call that makes it a plain Parameter."""
    computed = {
        name: _weight_maker(module)
        for name, module in model.named_modules()
        if isinstance(module, PRUNABLE_TYPES) and not isinstance(module._parameters.get("weight"), nn.Parameter)
    }
    if computed:
        named = "; ".join(f"{name!r}: {how}" for name, how in list(computed.items())[:5])
        more = f" (and {len(computed) - 5} more)" if len(computed) > 5 else ""
        raise TypeError(
            f"{len(computed)} layer(s) compute their weight in their forward instead of holding it as a Parameter, "
            f"so the zeros a method writes would not last: {named}{more}; make each weight a plain Parameter first "
            "(zeros already there stay and count toward the target)"
        )


def _weight_maker(module: nn.Module) -> str:
    """What remakes this module's weight, and the call that folds it into a plain Parameter."""
    if parametrize.is_parametrized(module, "weight"):
        kinds = ", ".join(type(p).__name__ for p in weight_parametrizations(module))
        return f"parametrized ({kinds}), torch.nn.utils.parametrize.remove_parametrizations(module, 'weight')"
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, prune.BasePruningMethod):
            return "torch.nn.utils.prune's mask, torch.nn.utils.prune.remove(module, 'weight')"
        if isinstance(hook, WeightNorm):
            return "torch.nn.utils.weight_norm, torch.nn.utils.remove_weight_norm(module)"
        if isinstance(hook, SpectralNorm):
            return "torch.nn.utils.spectral_norm, torch.nn.utils.remove_spectral_norm(module)"
    return "its weight is no Parameter of its own, module.weight = nn.Parameter(module.weight.detach())"


def check_weight_used_as_stored(layers: dict[str, nn.Module]) -> None:
    """Refuse a chosen layer whose forward transforms its stored weight (its output is not linear in it)."""
    transformed = [name for name, module in layers.items() if _transforms_weight(module)]
    if transformed:
        kinds = sorted({type(layers[name]).__name__ for name in transformed})
        shown = transformed[:5] + ([f"and {len(transformed) - 5} more"] if len(transformed) > 5 else [])
        raise TypeError(
            f"{len(transformed)} layer(s) ({', '.join(kinds)}) compute with a transform of their stored weight, not "
            f"the weight itself (timm's StdConv2d and ScaledStdConv2d standardise it): zeros stored there are not "
            f"zeros in what they compute, so the sparsity reported would not be the model's: {shown}; keep them "
            "dense (exclude=[...] or filter_fn), or replace each with an nn.Conv2d / nn.Linear holding the weight it "
            "computes with"
        )


@torch.no_grad()
def _transforms_weight(module: nn.Module) -> bool:
    """True when halving the stored weight does not halve the output's weight term (probed on an eval copy; a probe
    the layer cannot take says nothing: False)."""
    x = _probe_input(module)
    probe = copy.deepcopy(module).eval()  # eval: a layer that drops weights in training would not repeat itself
    weight = cast(torch.Tensor, probe.weight)  # the copy's, scaled in place: as stored, halved (exact), zero
    try:
        once = probe.forward(x)
        weight.mul_(0.5)
        half = probe.forward(x)
        weight.zero_()
        bias_term = probe.forward(x)
    except (RuntimeError, TypeError, ValueError):
        return False
    if not all(bool(torch.isfinite(out).all()) for out in (once, half, bias_term)):
        return False
    term = once - bias_term
    tolerance = 1e-4 * float(term.abs().max()) + 1e-6
    return not torch.allclose(half - bias_term, 0.5 * term, rtol=1e-4, atol=tolerance)


def _probe_input(module: nn.Module) -> torch.Tensor:
    """A small seeded input the layer takes: (2, in_features), or (1, in_channels, s, s) with room for its kernel
    and stride twice over. The global RNG is untouched."""
    weight = cast(torch.Tensor, module.weight)
    generator = torch.Generator().manual_seed(0)
    if isinstance(module, nn.Conv2d):
        size = max(d * (k - 1) + 1 + 2 * s for k, d, s in zip(module.kernel_size, module.dilation, module.stride))
        shape: tuple[int, ...] = (1, module.in_channels, size, size)
    else:
        shape = (2, int(weight.shape[1]))
    return torch.randn(shape, generator=generator).to(device=weight.device, dtype=weight.dtype)
