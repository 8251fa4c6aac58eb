"""The sparsity tools FCPTS and every baseline share: which layers are prunable, the threshold mask, the input
checks (each layer computes with the weight it stores, so the zeros a method stores are zeros it computes with) and
exact counting of zeros."""

from __future__ import annotations

import copy
import decimal
import math
import numbers
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize, prune
from torch.nn.utils.spectral_norm import SpectralNorm
from torch.nn.utils.weight_norm import WeightNorm

PRUNABLE_TYPES: tuple[type[nn.Module], ...] = (nn.Conv2d, nn.Linear)
# Layers whose weights no method here prunes: reported (`unprunable_weights`), never silently left dense.
UNPRUNABLE_TYPES: tuple[type[nn.Module], ...] = (
    nn.modules.conv._ConvNd,
    nn.MultiheadAttention,
    nn.Bilinear,
    nn.RNNBase,
)


class NoPrunableLayersError(ValueError):
    """Raised when a model has no Conv2d/Linear layer left to prune."""


class PrunableLayers(dict[str, nn.Module]):
    """The layers a run prunes, by name; `sharing[name]`: the other modules that hold that layer's weight
    Parameter itself, so a method that reparametrizes the weight (a mask during training) gives them the same."""

    sharing: dict[str, list[nn.Module]]


def sharing_modules(layers: dict[str, nn.Module], name: str) -> list[nn.Module]:
    """The other modules that use layer `name`'s weight (none unless `layers` came from `prunable_layers`)."""
    return getattr(layers, "sharing", {}).get(name, [])


def parametrize_weights(layers: dict[str, nn.Module], make: Callable[[str, nn.Module], nn.Module]) -> dict:
    """Each layer's weight parametrized by `make(name, layer)`, the modules sharing it by the same one (one mask for
    a shared weight); returns the parametrizations by layer name."""
    made = {}
    for name, module in layers.items():
        made[name] = make(name, module)
        for user in (module, *sharing_modules(layers, name)):
            parametrize.register_parametrization(user, "weight", made[name])
    return made


def unparametrize_weights(layers: dict[str, nn.Module], leave_parametrized: bool = False) -> None:
    """Plain weights again: the unmasked ones, or (`leave_parametrized`) their parametrized values."""
    for name, module in layers.items():
        for user in sharing_modules(layers, name):
            parametrize.remove_parametrizations(user, "weight", leave_parametrized=False)
        parametrize.remove_parametrizations(module, "weight", leave_parametrized=leave_parametrized)


def prunable_layers(
    model: nn.Module, exclude: str | Iterable[str] = (), filter_fn: Callable[[nn.Module, str], bool] | None = None
) -> PrunableLayers:
    """Every Conv2d and Linear of `model` by qualified name, minus `exclude` and those `filter_fn` rejects; a weight
    shared by several modules is one layer, named by its first, kept dense when any of them is excluded."""
    exclude = {exclude} if isinstance(exclude, str) else set(exclude)
    names = {name for name, module in model.named_modules() if isinstance(module, PRUNABLE_TYPES)}
    unknown = exclude - names
    if unknown:
        raise ValueError(
            f"exclude names {sorted(unknown)} are not Conv2d/Linear layers of this model; "
            f"prunable layers are e.g. {sorted(names)[:5]}"
        )
    layers = PrunableLayers()
    layers.sharing = {}
    for owner, users in _weight_users(model).items():
        if all(name not in exclude and (filter_fn is None or filter_fn(module, name)) for name, module in users):
            layers[owner] = users[0][1]
            if len(users) > 1:
                layers.sharing[owner] = [module for _, module in users[1:]]
    if not layers and names:
        how = " and ".join(([f"exclude={sorted(exclude)}"] if exclude else []) + (["filter_fn"] if filter_fn else []))
        raise NoPrunableLayersError(
            f"{how} left none of {type(model).__name__}'s {len(names)} prunable layers (e.g. {sorted(names)[:3]}) "
            "to prune: keep at least one"
        )
    if not layers:
        others = unprunable_weights(model)
        held = f"; its {describe_unprunable(others)} are not" if others else ""
        raise NoPrunableLayersError(
            f"{type(model).__name__} has no prunable layers (nn.Conv2d / nn.Linear){held}; "
            "pass a model that contains 2-d convolutions or linear layers"
        )
    return layers


def unprunable_weights(model: nn.Module) -> dict[str, tuple[str, int]]:
    """Weights of layers no method here prunes, {parameter name: (where, numel)}: they stay dense and outside the
    global sparsity, which the user must be told."""
    found: dict[str, tuple[str, int]] = {}
    for module_name, module in model.named_modules():
        if isinstance(module, PRUNABLE_TYPES) or not isinstance(module, UNPRUNABLE_TYPES):
            continue
        for param_name, param in module.named_parameters(recurse=False):
            if param.dim() >= 2:
                name = f"{module_name}.{param_name}" if module_name else param_name
                found[name] = (f"{type(module).__name__}.{param_name}", param.numel())
    return found


def describe_unprunable(weights: dict[str, tuple[str, int]]) -> str:
    """ "6,144 weights in 2 tensors (MultiheadAttention.in_proj_weight)": what `unprunable_weights` found, short."""
    kinds = sorted({where for where, _ in weights.values()})
    return f"{weights_in_tensors([numel for _, numel in weights.values()])} ({', '.join(kinds)})"


def weights_in_tensors(numels: list[int]) -> str:
    """ "6,144 weights in 2 tensors" for tensors of these sizes."""
    return f"{sum(numels):,} weights in {len(numels)} tensor{'s' if len(numels) > 1 else ''}"


def _weight_users(model: nn.Module) -> dict[str, list[tuple[str, nn.Module]]]:
    """The Conv2d/Linear modules grouped by the weight Parameter they hold, keyed by the first one's name."""
    groups: dict[int, list[tuple[str, nn.Module]]] = {}
    for name, module in model.named_modules():
        if isinstance(module, PRUNABLE_TYPES):
            groups.setdefault(id(_stored_weight(module)), []).append((name, module))
    return {users[0][0]: users for users in groups.values()}


def layer_weight(layer: nn.Module) -> torch.Tensor:
    """A prunable layer's weight, typed as the Tensor it is (torch types module attributes `Tensor | Module`)."""
    return cast(torch.Tensor, layer.weight)


def layer_bias(layer: nn.Module) -> torch.Tensor | None:
    """A prunable layer's bias (None when it has none), typed as `layer_weight` is."""
    return cast("torch.Tensor | None", layer.bias)


def weight_parametrizations(layer: nn.Module) -> parametrize.ParametrizationList:
    """What remakes a parametrized layer's weight (`layer.parametrizations["weight"]`), typed."""
    return cast(parametrize.ParametrizationList, cast(nn.ModuleDict, layer.parametrizations)["weight"])


def _stored_weight(module: nn.Module) -> torch.Tensor:
    """The weight tensor a module holds: under a parametrization its original (`module.weight` is new each time)."""
    if parametrize.is_parametrized(module, "weight"):
        made_from = weight_parametrizations(module)  # `original`; `original0`, ... for weight_norm's (g, v)
        original = getattr(made_from, "original", None)
        return cast(torch.Tensor, made_from.original0 if original is None else original)
    return cast(torch.Tensor, module.weight)


def check_zeros_within_target(layers: dict[str, nn.Module], target: float) -> None:
    """Masks only add zeros: layers already holding more zeros than round(target * N) cannot end at the target,
    so refuse before any work (target 0 asks for no pruning and keeps them)."""
    if target == 0:
        return
    zeros = total = 0
    for module in layers.values():
        weight = layer_weight(module).detach()
        zeros += int((weight == 0).sum())
        total += weight.numel()
    allowed = round(target * total)
    if zeros > allowed:
        raise ValueError(
            f"the {len(layers)} layer(s) to prune already hold {zeros:,} zero weights of {total:,} "
            f"({100 * zeros / total:.2f}%), more than the {100 * target:.2f}% target allows ({allowed:,}): masks "
            f"only add zeros; ask for at least {math.ceil(10_000 * zeros / total) / 100:.2f}%, or start from the "
            "dense model"
        )


class Sparsity(float):
    """A checked global sparsity target in [0, 1): each stage checks a plain number and passes this on unchecked,
    so a target is checked once, where it enters."""

    __slots__ = ()

    def __new__(cls, target: Any) -> Sparsity:
        value = target
        if isinstance(value, (torch.Tensor, np.ndarray)):
            if value.ndim != 0:  # a bool or complex one fails below, as its .item() does
                raise TypeError(f"target sparsity must be one real number in [0, 1), got a {_describe(value)}")
            value = value.item()
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, decimal.Decimal)):
            raise TypeError(
                f"target sparsity must be a real number in [0, 1) (e.g. 0.9 for 90% zeros), got {_describe(target)}"
            )
        value = float(value)
        if math.isnan(value) or not 0.0 <= value < 1.0:
            raise ValueError(
                f"target sparsity must be in [0, 1) (a fraction of zero weights, e.g. 0.9 for 90%), got {target}"
            )
        return super().__new__(cls, value)


def check_target(target: Any) -> Sparsity:
    """A target as a checked `Sparsity`: any real number (a 0-d tensor or array too); bool, str, complex and NaN
    are refused."""
    return target if isinstance(target, Sparsity) else Sparsity(target)


def _describe(value: Any) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"{value!r} ({type(value).__name__})"


def check_finite_weights(model: nn.Module) -> None:
    """Refuse NaN or Inf in the dense model's parameters or buffers before any work, naming the tensor."""
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, tensor, bad in _non_finite(named):
            raise ValueError(
                f"the model's {kind} {name!r} holds {bad} NaN/Inf value(s) of {tensor.numel()}: the dense model "
                "is broken (a diverged training or a corrupted checkpoint); load finite weights before sparsifying"
            )


def _non_finite(named: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor, int]]:
    """(name, tensor, how many of its values are NaN or Inf) for each floating tensor that holds any."""
    for name, tensor in named:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor.detach()).all()):
            yield name, tensor, int((~torch.isfinite(tensor.detach())).sum())


COMPUTE_DTYPES = (torch.float32, torch.float64)


def check_weight_dtype(model: nn.Module) -> None:
    """The methods compute in the model's dtype and are made for float32 (half precision overflows): refuse others."""
    for name, p in model.named_parameters():
        if p.is_floating_point() and p.dtype not in COMPUTE_DTYPES:
            raise TypeError(
                f"the model's parameter {name!r} is {p.dtype}: sparsify a float32 model (model.float(), with "
                "float32 calibration inputs) and cast the sparse model back afterwards (zeros stay zeros); for "
                "bfloat16 forwards while FCPTS trains, pass amp='bf16'"
            )


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


def check_finite_result(model: nn.Module, method: str) -> None:
    """A method that leaves NaN or Inf in the weights has failed, whatever sparsity it reports."""
    for name, _, bad in _non_finite(model.named_parameters()):
        raise FloatingPointError(
            f"{method} left {bad} NaN/Inf value(s) in {name!r} of the sparse model: the run diverged; a "
            "smaller learning rate, more calibration images or float32 inputs are the usual ways out"
        )


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
    """M = 0.5 * sgn(|W| - t) + 0.5 (paper Eq. 1), with a straight-through gradient into t only (|W| detached)."""
    return 0.5 * _BinActive.apply(weight.detach().abs() - threshold) + 0.5


def hard_mask(weight: torch.Tensor, threshold: torch.Tensor | float) -> torch.Tensor:
    """The boolean keep-mask |W| >= t, matching the bridge function's count of |W| < t as pruned."""
    return weight.abs() >= threshold


def sparsity_summary(
    model: nn.Module, exclude: str | Iterable[str] = (), filter_fn: Callable[[nn.Module, str], bool] | None = None
) -> tuple[float, list[dict]]:
    """Global sparsity (zeros / all prunable weights) and a per-layer list (name, type, numel, sparsity,
    "shared_with" for a shared weight, counted once)."""
    layers = prunable_layers(model, exclude, filter_fn)
    shared = {owner: [n for n, _ in users[1:]] for owner, users in _weight_users(model).items() if len(users) > 1}
    zeros = total = 0
    per_layer = []
    for name, module in layers.items():
        w = layer_weight(module).detach()
        z = int((w == 0).sum().item())
        zeros += z
        total += w.numel()
        per_layer.append(
            {"name": name, "type": type(module).__name__, "numel": w.numel(), "sparsity": z / w.numel()}
            | ({"shared_with": shared[name]} if name in shared else {})
        )
    return zeros / total, per_layer


@torch.no_grad()
def apply_keep_masks(layers: dict[str, nn.Module], masks: dict[str, torch.Tensor]) -> None:
    """Zero the weights outside each boolean keep-mask, in place."""
    for name, module in layers.items():
        weight = layer_weight(module)
        weight.mul_(masks[name].to(weight.dtype))
