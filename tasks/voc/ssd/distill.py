"""The output that PTS methods reconstruct on a detector: distillation methods expect a model with one
output tensor and named blocks, and an SSD has two outputs whose softmax must be taken per prior."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tasks.voc.ssd.model import SSD


class DistillView(nn.Module):
    """A detector whose forward returns one tensor, for methods that distil a model's output.

    forward(x) = T * log_softmax(class_logits / T) per prior, flattened to (B, A * C). FCPTS's output loss
    (`fcpts.distill.kl_distill`: softmax over all of dim 1 at temperature T, KL summed, x T^2 / batch) on
    this tensor is exactly T^2 x the mean over images and priors of the per-prior KL between teacher and
    student class distributions at temperature T: the joint softmax of per-prior normalised
    log-probabilities is p(c | prior) / A. (Softmax over the raw (A x C) logits, or over class logits and
    box offsets concatenated, would instead make one distribution over all priors, dominated by the
    most confident background priors and mixing box offsets into a probability.) With another
    temperature than T in the method the loss is still zero exactly when the class distributions agree.

    Box offsets are reconstructed with block MSE: `reconstruction_blocks` names the regression headers
    (and, by choice, the classification headers and backbone blocks) for FCPTS's `block_names`.
    Layer names inside are `ssd.<pytorch-ssd name>`.
    """

    def __init__(self, ssd: SSD, temperature: float = 4.0):
        super().__init__()
        self.ssd = ssd
        self.temperature = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits, _ = self.ssd(x)
        t = self.temperature
        return (t * F.log_softmax(logits / t, dim=-1)).flatten(1)


RECONSTRUCTIONS = {
    "kl-box": "KL on per-prior class distributions (T=4) + MSE on the box-offset (regression) header outputs",
    "mse-heads": "kl-box + MSE on the class-logit header outputs: MSE on every head output",
    "mse-blocks": "mse-heads + MSE on every backbone block and extra layer output (FCPTS's CIFAR default, "
    "released code's layer loss)",
}


def reconstruction_blocks(ssd: SSD, kind: str = "mse-blocks", prefix: str = "ssd.") -> list[str]:
    """Module names for FCPTS's block MSE (`block_names`) on a DistillView-wrapped detector."""
    if kind not in RECONSTRUCTIONS:
        raise ValueError(f"unknown detection reconstruction {kind!r}; choose from {', '.join(RECONSTRUCTIONS)}")
    names = [f"{prefix}regression_headers.{i}" for i in range(len(ssd.regression_headers))]
    if kind in ("mse-heads", "mse-blocks"):
        names += [f"{prefix}classification_headers.{i}" for i in range(len(ssd.classification_headers))]
    if kind == "mse-blocks":
        names += [f"{prefix}base_net.{i}" for i in range(len(ssd.base_net))]
        names += [f"{prefix}extras.{i}" for i in range(len(ssd.extras))]
    return names
