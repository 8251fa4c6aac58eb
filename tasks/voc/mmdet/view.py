"""An mmdet single-stage detector as the methods see it: one output tensor, its raw head outputs named.

The suite's SSD contract (`DistillView`): forward(x) returns T * log p(class | anchor) per anchor, flattened (a
sigmoid head's Bernoulli per anchor and class as its two log-probabilities). The raw head outputs pass through the
identities `class_logits` and `box_regression` for FCPTS's block MSE. Every Conv2d and Linear is prunable, head
included, as in the suite's SSD task.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fcpts.core.masks import PRUNABLE_TYPES, layer_weight, prunable_layers
from fcpts.methods.fcpts import default_blocks
from tasks.voc.ssd import check_reconstruction


class HeadOutputView(nn.Module):
    """A single-stage mmdet detector whose forward returns per-anchor class log-probabilities at T."""

    detector: Any  # an mmdet detector: its bbox_head and extract_feat are beyond what torch's Module types say

    def __init__(self, detector: nn.Module, temperature: float = 4.0):
        super().__init__()
        self.detector = detector
        self.temperature = temperature
        head = self.detector.bbox_head
        self.sigmoid = bool(getattr(head, "use_sigmoid_cls", False))
        self.class_channels = int(head.cls_out_channels)
        self.class_logits = nn.Identity()
        self.box_regression = nn.Identity()

    def head_outputs(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(class logits (B, anchors, C), box regression (B, anchors, code)), mmdet's anchor order."""
        outputs = self.detector.bbox_head(self.detector.extract_feat(x))
        cls_scores, bbox_preds = outputs[0], outputs[1]
        logits = torch.cat([_per_anchor(c, self.class_channels) for c in cls_scores], 1)
        code = bbox_preds[0].shape[1] * self.class_channels // cls_scores[0].shape[1]
        boxes = torch.cat([_per_anchor(b, code) for b in bbox_preds], 1)
        return logits, boxes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits, boxes = self.head_outputs(x)
        logits = self.class_logits(logits)
        self.box_regression(boxes)  # seen by forward hooks (FCPTS's MSE), not part of the output
        t = self.temperature
        if self.sigmoid:
            log_p = torch.stack([F.logsigmoid(logits / t), F.logsigmoid(-logits / t)], -1)
        else:
            log_p = F.log_softmax(logits / t, dim=-1)
        return (t * log_p).flatten(1)


def _per_anchor(x: torch.Tensor, channels: int) -> torch.Tensor:
    """(B, A * channels, H, W) -> (B, H * W * A, channels), as mmdet's heads flatten them."""
    return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, channels)


def reconstruction_blocks(view: HeadOutputView, kind: str = "mse-blocks") -> list[str]:
    """Module names for FCPTS's block MSE (`block_names`): the suite's SSD choices on an mmdet detector."""
    check_reconstruction(kind)
    names = ["box_regression"]
    if kind in ("mse-heads", "mse-blocks"):
        names.append("class_logits")
    if kind == "mse-blocks":
        backbone = view.detector.backbone
        stems = [  # stages outside the backbone's Sequentials (MobileNetV2's conv1, conv2)
            f"detector.backbone.{n}"
            for n, m in backbone.named_children()
            if not isinstance(m, (nn.Sequential, nn.ModuleList))
            and any(isinstance(c, PRUNABLE_TYPES) for c in m.modules())
        ]
        names += stems + [n for n in default_blocks(view) if n.startswith(("detector.backbone.", "detector.neck."))]
    return names


def check_layers_reach_outputs(view: HeadOutputView, size: int = 64) -> None:
    """Refuse a detector whose pruned layers do not all feed the distilled outputs (FCOS's centerness: masks chosen
    and never learned), found by one backward on a zero image."""
    layers = prunable_layers(view)
    mode, frozen = view.training, [m.weight for m in layers.values() if not m.weight.requires_grad]
    try:
        view.eval()
        for weight in frozen:  # a frozen backbone stage is pruned too: asked as every other layer
            weight.requires_grad_(True)
        with torch.enable_grad():
            logits, boxes = view.head_outputs(torch.zeros(1, 3, size, size))
            reached = torch.autograd.grad(
                logits.sum() + boxes.sum(), [layer_weight(m) for m in layers.values()], allow_unused=True
            )
    finally:
        view.train(mode)
        for weight in frozen:
            weight.requires_grad_(False)
    unreached = [name for (name, _), grad in zip(layers.items(), reached) if grad is None]
    if unreached:
        raise ValueError(
            f"{type(view.detector).__name__}: {', '.join(unreached)} feed no output the methods distil (class "
            "logits, box regression), so they would be pruned and never reconstructed; detectors with other head "
            "outputs (FCOS's centerness) are not supported"
        )


def pruned_layers(view: HeadOutputView) -> dict:
    """What a record says about which layers were pruned."""
    layers = prunable_layers(view)
    return {
        "rule": "every Conv2d and Linear of the detector (backbone, neck, head; the head's last classification and "
        "regression convs included), as the suite's SSD task",
        "n_layers": len(layers),
        "n_weights": sum(layer_weight(m).numel() for m in layers.values()),
        "excluded": [],
    }
