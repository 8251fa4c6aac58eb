"""BatchNorm and sparsity: fold BN into the Conv2d that alone feeds it (found with torch.fx; module names unchanged),
re-estimate BN statistics."""

from __future__ import annotations

import torch
import torch.fx
from torch import nn

from .calibration import Calibration, to_device


class _ConvBnLeafTracer(torch.fx.Tracer):
    """Keeps every Conv2d / BatchNorm2d subclass (library layers too) as one call_module node, and so every module
    that holds neither: no pair can be inside it, and its code (an attention's shape checks) need not trace."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return (
            isinstance(m, (nn.Conv2d, nn.BatchNorm2d))
            or not any(isinstance(sub, (nn.Conv2d, nn.BatchNorm2d)) for sub in m.modules())
            or super().is_leaf_module(m, qualname)
        )


def conv_bn_pairs(model: nn.Module) -> list[tuple[str, str]]:
    """(conv name, bn name) for every foldable Conv2d -> BatchNorm2d edge; none, without tracing, in a model with
    no BatchNorm2d."""
    if not any(isinstance(m, nn.BatchNorm2d) for m in model.modules()):
        return []
    try:
        graph = _ConvBnLeafTracer().trace(model)
    except Exception as e:  # tracing fails on data-dependent control flow
        raise ValueError(
            f"cannot fold BatchNorm in {type(model).__name__}: torch.fx could not trace it ({e}); "
            "fold it yourself or use a traceable model"
        ) from e
    modules = dict(model.named_modules())
    pairs = []
    for node in graph.nodes:
        if node.op != "call_module" or not isinstance(modules.get(node.target), nn.BatchNorm2d):
            continue
        src = node.args[0]
        if (
            isinstance(src, torch.fx.Node)
            and src.op == "call_module"
            and isinstance(modules.get(src.target), nn.Conv2d)
            and len(src.users) == 1
        ):
            pairs.append((str(src.target), str(node.target)))
    return pairs


@torch.no_grad()
def fold_batchnorm(model: nn.Module) -> list[tuple[str, str]]:
    """Fold every Conv2d -> BatchNorm2d pair of `model` in place; returns the pairs folded."""
    pairs = conv_bn_pairs(model)
    modules = dict(model.named_modules())
    for conv_name, bn_name in pairs:
        conv, bn = modules[conv_name], modules[bn_name]
        mean, var = bn.running_mean, bn.running_var
        if mean is None or var is None:
            raise TypeError(f"cannot fold {bn}: it keeps no running statistics (track_running_stats=False)")
        scale = bn.weight / torch.sqrt(var + bn.eps)
        conv.weight.mul_(scale.view(-1, 1, 1, 1))
        bias = conv.bias if conv.bias is not None else torch.zeros_like(mean)
        conv.bias = nn.Parameter((bn.bias + (bias - mean) * scale).detach().clone())
        tail = [m for m in (getattr(bn, "drop", None), getattr(bn, "act", None)) if isinstance(m, nn.Module)]
        model.set_submodule(bn_name, nn.Sequential(*tail) if tail else nn.Identity())
    return pairs


@torch.no_grad()
def recalibrate_bn(model: nn.Module, calib: Calibration, device: torch.device, batch_size: int = 256) -> None:
    """Replace BN running statistics by exact averages over the calibration set (final sparse weights)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average
    model.train()
    for b in range(calib.in_order_batches(batch_size)):
        model(to_device(calib.in_order(b, batch_size), device))
    for m, mom in zip(bns, saved):
        m.momentum = mom
