"""Export a (sparse) PyTorch model to ONNX for inference runtimes, and check it against PyTorch.

The exported graph is the inference graph: BatchNorm folded into the convolutions (fewer ops, and what a
deployment runtime would do anyway), opset 17, a dynamic batch axis. Folding multiplies each conv by its
BN scale, which keeps zeros zero but turns them into -0.0 under a negative scale; those are written as
+0.0, so every pruned weight is the bit pattern 0 that sparse storage and sparse kernels look for.
"""

from __future__ import annotations

import copy
import io
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fcpts.core.bn import fold_batchnorm
from fcpts.core.masks import layer_weight, prunable_layers

OPSET = 17


def inference_copy(model: nn.Module) -> nn.Module:
    """An eval-mode CPU copy with BatchNorm folded and -0.0 weights made +0.0 (same outputs)."""
    model = copy.deepcopy(model).cpu().eval()
    fold_batchnorm(model)
    with torch.no_grad():
        for layer in prunable_layers(model).values():
            weight = layer_weight(layer)
            weight[weight == 0] = 0.0  # -0.0 == 0 is True: rewrites both as +0.0
    return model


def export_onnx(model: nn.Module, path: str | Path | None, input_shape: tuple[int, ...], opset: int = OPSET) -> bytes:
    """Export `model` as-is (call `inference_copy` first) with a dynamic batch axis; returns the bytes
    and writes them to `path` when given. Uses the TorchScript exporter (dynamo=False): it handles the
    CIFAR ResNets' channel-padding F.pad shortcut and needs no extra dependencies."""
    dummy = torch.zeros(1, *input_shape)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            model,
            (dummy,),
            buf,  # type: ignore[arg-type]  # torch's stub says a path; the exporter writes to a file-like object too
            opset_version=opset,
            dynamo=False,
            input_names=["input"],
            output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        )
    data = buf.getvalue()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
    return data


def ort_session(model_bytes: bytes | str, threads: int = 1):
    """A CPU onnxruntime session of a serialized model (or of the path to one) with a fixed thread count (so
    timings and checks are reproducible)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


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
