"""Priors, box coding and post-processing, apart from the networks because training (targets), evaluation
(detections) and the CPU substitute's other input sizes all need them without caring which backbone runs.

pytorch-ssd's configuration, torchvision's ops:
- 300x300 input, RGB 0..255 mapped by (x - 127) / 128, plain bilinear resize (no aspect preservation);
- 6 feature maps 19/10/5/3/2/1, shrinkage 16/32/64/100/150/300, box sizes 60/105/150/195/240/285/330,
  aspect ratios 2 and 3: 6 priors per cell, 2,268 + 600 + 150 + 54 + 24 + 6 = 3,000 priors, (cx, cy, w, h)
  relative to the image and clamped to [0, 1] as pytorch-ssd does;
- box coding: torchvision's BoxCoder with weights (10, 10, 5, 5) = 1 / (center_variance 0.1, size_variance 0.2);
- post-processing: softmax, per class the 200 best priors above 0.01, class-wise NMS at IoU 0.45
  (`torchvision.ops.batched_nms`), boxes scaled back to the original image's pixels (not clipped).
Other input sizes (the CPU substitute) scale the box sizes by size/300 and take the feature-map sizes
from the network itself (`SSDConfig.for_model`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torchvision.models.detection._utils import BoxCoder
from torchvision.ops import batched_nms, box_convert, box_iou

if TYPE_CHECKING:
    from tasks.voc.ssd.model import SSD


@dataclass(frozen=True)
class PriorSpec:
    feature_map_size: int
    shrinkage: float  # image pixels per feature-map cell (pytorch-ssd's name)
    min_size: float  # box sizes in input pixels
    max_size: float
    aspect_ratios: tuple[int, ...] = (2, 3)

    @property
    def priors_per_cell(self) -> int:
        return 2 + 2 * len(self.aspect_ratios)


VOC300_SPECS = (
    PriorSpec(19, 16, 60, 105),
    PriorSpec(10, 32, 105, 150),
    PriorSpec(5, 64, 150, 195),
    PriorSpec(3, 100, 195, 240),
    PriorSpec(2, 150, 240, 285),
    PriorSpec(1, 300, 285, 330),
)
_VOC300_SIZES = (60, 105, 150, 195, 240, 285, 330)


@dataclass(frozen=True)
class SSDConfig:
    """pytorch-ssd's `mobilenetv1_ssd_config` (used by both detectors) plus the evaluation settings."""

    image_size: int = 300
    specs: tuple[PriorSpec, ...] = VOC300_SPECS
    image_mean: float = 127.0
    image_std: float = 128.0
    center_variance: float = 0.1
    size_variance: float = 0.2
    nms_iou: float = 0.45
    score_threshold: float = 0.01  # pytorch-ssd Predictor's filter_threshold
    candidate_size: int = 200  # per class, before NMS
    max_detections: int | None = None  # per image after NMS; pytorch-ssd keeps all (top_k=-1)
    match_iou: float = 0.5  # training: prior <-> ground-truth matching

    @classmethod
    def for_size(cls, image_size: int, feature_map_sizes: Sequence[int], **kw) -> SSDConfig:
        """pytorch-ssd's priors at another input size: box sizes scaled by image_size/300, one prior grid
        per feature map (shrinkage = image_size / map size). At 300 it is the published configuration."""
        if image_size == 300 and tuple(feature_map_sizes) == tuple(s.feature_map_size for s in VOC300_SPECS):
            return cls(**kw)
        scale = image_size / 300
        specs = tuple(
            PriorSpec(int(n), image_size / n, _VOC300_SIZES[i] * scale, _VOC300_SIZES[i + 1] * scale)
            for i, n in enumerate(feature_map_sizes)
        )
        return cls(image_size=image_size, specs=specs, **kw)

    @classmethod
    def for_model(cls, model: SSD, image_size: int, **kw) -> SSDConfig:
        return cls.for_size(image_size, model.feature_map_sizes(image_size), **kw)

    def priors(self) -> torch.Tensor:
        """(A, 4) priors (cx, cy, w, h) relative to the image, clamped to [0, 1], pytorch-ssd's order:
        per feature map, rows then columns, per cell: min square, sqrt(min*max) square, then per aspect
        ratio r the min box widened and heightened by sqrt(r)."""
        out = []
        for s in self.specs:
            scale = self.image_size / s.shrinkage
            small, big = s.min_size / self.image_size, math.sqrt(s.min_size * s.max_size) / self.image_size
            for j, i in itertools.product(range(s.feature_map_size), repeat=2):
                cx, cy = (i + 0.5) / scale, (j + 0.5) / scale
                out += [[cx, cy, small, small], [cx, cy, big, big]]
                for ratio in s.aspect_ratios:
                    r = math.sqrt(ratio)
                    out += [[cx, cy, small * r, small / r], [cx, cy, small / r, small * r]]
        return torch.tensor(out, dtype=torch.float32).clamp_(0.0, 1.0)

    def box_coder(self) -> BoxCoder:
        return BoxCoder(
            weights=(1 / self.center_variance, 1 / self.center_variance, 1 / self.size_variance, 1 / self.size_variance)
        )

    def to_dict(self) -> dict:
        return asdict(self)


def decode_boxes(regression: torch.Tensor, priors_cxcywh: torch.Tensor, config: SSDConfig) -> torch.Tensor:
    """(..., A, 4) regressions -> (..., A, 4) corner-form boxes relative to the image."""
    anchors = box_convert(priors_cxcywh.to(regression), "cxcywh", "xyxy")
    shape = regression.shape
    flat = regression.reshape(-1, shape[-2], 4)
    boxes = [config.box_coder().decode_single(r, anchors) for r in flat]
    return torch.stack(boxes).reshape(shape)


def encode_targets(
    gt_boxes: torch.Tensor, gt_labels: torch.Tensor, priors_cxcywh: torch.Tensor, config: SSDConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """pytorch-ssd's MatchPrior: each prior takes the ground truth it overlaps most (background, label 0,
    below `match_iou`), each ground truth also claims its best prior; returns (A, 4) regression targets and
    (A,) labels. Boxes are corner-form relative to the image; labels 1..C-1."""
    anchors = box_convert(priors_cxcywh.to(gt_boxes.device), "cxcywh", "xyxy")
    if len(gt_boxes) == 0:
        return torch.zeros_like(anchors), torch.zeros(len(anchors), dtype=torch.int64, device=anchors.device)
    ious = box_iou(gt_boxes, anchors)  # (G, A)
    best_iou, best_gt = ious.max(0)
    best_prior = ious.argmax(1)
    best_gt[best_prior] = torch.arange(len(gt_boxes), device=best_gt.device)
    best_iou[best_prior] = 2.0
    labels = gt_labels[best_gt].clone()
    labels[best_iou < config.match_iou] = 0
    targets = config.box_coder().encode_single(gt_boxes[best_gt], anchors)
    return targets, labels


@torch.no_grad()
def postprocess(
    class_logits: torch.Tensor,
    regression: torch.Tensor,
    priors: torch.Tensor,
    config: SSDConfig,
    image_sizes: Sequence[tuple[int, int]],
) -> list[dict[str, torch.Tensor]]:
    """Detections per image: {"boxes" (K, 4) xyxy in original pixels (0-based), "scores", "labels"}.
    `image_sizes` are the original (height, width)."""
    probs = F.softmax(class_logits.float(), dim=-1)
    boxes_rel = decode_boxes(regression.float(), priors, config)
    out = []
    num_classes = probs.shape[-1]
    k = min(config.candidate_size, probs.shape[1])
    for p, b, (h, w) in zip(probs, boxes_rel, image_sizes):
        top, idx = p[:, 1:].topk(k, dim=0)  # (k, C-1): per class its best priors
        cls = torch.arange(1, num_classes, device=p.device).expand(k, -1)
        keep = top > config.score_threshold
        scores, prior_idx, labels = top[keep], idx[keep], cls[keep]
        boxes = b[prior_idx] * torch.tensor([w, h, w, h], dtype=b.dtype, device=b.device)
        kept = batched_nms(boxes, scores, labels, config.nms_iou)
        if config.max_detections is not None:
            kept = kept[: config.max_detections]
        out.append({"boxes": boxes[kept], "scores": scores[kept], "labels": labels[kept]})
    return out
