"""FCPTS: fast and controllable post-training sparsity (Gong et al., AAAI 2024), and the methods it is
compared with, behind one registry. The whole surface, with its inputs and options: docs/api.md.

    import fcpts
    sparse_model, report = fcpts.sparsify(model, calibration, 0.9)                  # FCPTS
    sparse_model, report = fcpts.sparsify(model, calibration, 0.9, method="obs")    # any registered method
    print(report.summary())                    # method, target, achieved, layers, per-layer range, time

The returned model is the same module object, in eval mode, with plain weights holding exact zeros; its global
sparsity over the pruned Conv2d/Linear weights is round(target * N) / N (a shared weight counted once).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .core.attention import LinearAttention, attention_as_linear, attention_as_mha
from .core.masks import sparsity_summary
from .core.options import MethodOptions
from .core.report import SparsityReport
from .methods import METHODS, Method, get_method, list_methods
from .methods.fcpts import FCPTSOptions
from .methods.registry import OutputFn

__all__ = [
    "sparsify",
    "sparsity_summary",
    "attention_as_linear",
    "attention_as_mha",
    "LinearAttention",
    "FCPTSOptions",
    "MethodOptions",
    "SparsityReport",
    "METHODS",
    "Method",
    "get_method",
    "list_methods",
]
__version__ = "0.2.0"


def sparsify(
    model: nn.Module,
    calibration: Any,
    target: Any,
    *,
    method: str = "fcpts",
    options: MethodOptions | None = None,
    output_fn: OutputFn | None = None,
    **overrides: Any,
) -> tuple[nn.Module, SparsityReport]:
    """Sparsify `model` in place to global sparsity `target` in [0, 1) with `method` (default FCPTS; any name in
    `fcpts.METHODS`).

    `options`: an options object of the method's class, keyword options (`iterations=400`, `exclude="fc"`,
    `filter_fn=lambda module, name: ...`, ...) merged into it or making it alone; `output_fn(output) -> tensor`: the
    logits of a model that returns more than one tensor.
    """
    return get_method(method)(model, calibration, target, options, output_fn=output_fn, **overrides)
