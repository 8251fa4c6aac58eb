"""FCPTS: fast and controllable post-training sparsity (Gong et al., AAAI 2024), and the methods it is
compared with, behind one registry.

    import fcpts
    sparse_model, report = fcpts.sparsify(model, calibration_images, 0.9)
    sparse_model, report = fcpts.get_method("pot-l2norm")(model, calibration_images, 0.9)

`calibration` is a tensor of model inputs (N, ...) or a map-style Dataset of inputs (or (input, label)
pairs; labels are ignored). The returned model is the same module object, in eval mode, with plain
weights holding exact zeros; its global sparsity over the pruned Conv2d/Linear weights is round(target * N) / N.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from .core.report import SparsityReport
from .methods import METHODS, Method, get_method
from .methods.fcpts import FCPTSOptions

__all__ = ["sparsify", "FCPTSOptions", "SparsityReport", "METHODS", "Method", "get_method"]
__version__ = "0.2.0"


def sparsify(
    model: nn.Module,
    calibration: Any,
    target: float,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    **options: Any,
) -> tuple[nn.Module, SparsityReport]:
    """Sparsify `model` in place to global sparsity `target` in [0, 1) with FCPTS.

    `filter_fn(module, name)` chooses which Conv2d/Linear layers are pruned (default: all of them);
    `exclude=[names]` keeps named layers dense. Other options: see FCPTSOptions.
    """
    return get_method("fcpts")(model, calibration, target, filter_fn=filter_fn, **options)
