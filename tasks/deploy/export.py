"""Export a (sparse) PyTorch model to ONNX for inference runtimes (BatchNorm folded, opset 17, a dynamic batch
axis), and check it against PyTorch. Folding turns zeros under a negative BN scale into -0.0; those are written
as +0.0, the bit pattern 0 that sparse storage and sparse kernels look for.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fcpts.core.bn import fold_batchnorm
from fcpts.core.masks import layer_weight, prunable_layers


def inference_copy(model: nn.Module) -> nn.Module:
    """An eval-mode CPU copy with BatchNorm folded and -0.0 weights made +0.0 (same outputs)."""
    model = copy.deepcopy(model).cpu().eval()
    fold_batchnorm(model)
    with torch.no_grad():
        for layer in prunable_layers(model).values():
            weight = layer_weight(layer)
            weight[weight == 0] = 0.0  # -0.0 == 0 is True: rewrites both as +0.0
    return model


def export_onnx(model: nn.Module, path: str | Path, input_shape: tuple[int, ...]) -> bytes:
    """Export `model` as-is (call `inference_copy` first) with a dynamic batch axis to `path`; returns the bytes.
    Uses the TorchScript exporter (dynamo=False): it handles the CIFAR ResNets' channel-padding F.pad shortcut and
    needs no extra dependencies."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            model,
            (torch.zeros(1, *input_shape),),
            str(path),
            opset_version=17,
            dynamo=False,
            input_names=["input"],
            output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        )
    return Path(path).read_bytes()


def ort_predict(session, x: torch.Tensor | np.ndarray, batch_size: int = 500) -> np.ndarray:
    """Outputs of `session` on `x`, batch by batch."""
    x = np.asarray(x, dtype=np.float32)
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: x[i : i + batch_size]})[0] for i in range(0, len(x), batch_size)])


@torch.inference_mode()
def max_abs_diff(model: nn.Module, session, x: torch.Tensor) -> float:
    """Largest |PyTorch - ONNX| over all outputs for inputs `x` (model in eval mode)."""
    model.eval()
    ref = model(x).numpy()
    return float(np.abs(ref - ort_predict(session, x.numpy())).max())
