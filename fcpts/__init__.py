"""FCPTS: fast and controllable post-training sparsity (Gong et al., AAAI 2024).

    import fcpts
    sparse_model, report = fcpts.sparsify(model, calibration_images, 0.9)

`calibration` is a tensor of model inputs (N, ...) or a map-style Dataset of inputs (or (input, label)
pairs; labels are ignored). The returned model is the same module object, in eval mode, with plain
weights holding exact zeros; its global sparsity over all Conv2d/Linear weights is round(target * N) / N.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from .options import FCPTSOptions, SparsityReport

__all__ = ["sparsify", "FCPTSOptions", "SparsityReport"]
__version__ = "0.1.0"


def sparsify(model: nn.Module, calibration: Any, target: float, **options: Any) -> tuple[nn.Module, SparsityReport]:
    """Sparsify `model` in place to global sparsity `target` in [0, 1); see FCPTSOptions for options."""
    from .reconstruct import run

    return run(model, calibration, target, FCPTSOptions.from_kwargs(**options))
