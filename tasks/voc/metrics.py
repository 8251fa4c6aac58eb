"""PASCAL VOC2007 detection metric: mAP at IoU 0.5 with the 11-point interpolated AP, difficult boxes ignored.

The VOC devkit's `VOCevaldet` rules, as pytorch-ssd's `eval_ssd.py` (which produced the paper's dense numbers)
applies them: detections ranked by score (stable sort); each takes its image's best-IoU box of its class: above
0.5 and difficult, ignored; above 0.5 and unmatched, a true positive; else a false positive. AP = mean over
t in `np.arange(0, 1.1, 0.1)` of the best precision at recall >= t; mAP over classes with a non-difficult box.
IoU is torchvision's `box_iou` on continuous coordinates (no +1 on widths), as in pytorch-ssd.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torchvision.ops import box_iou


def voc07_ap(precision: np.ndarray, recall: np.ndarray) -> float:
    """11-point interpolated average precision (VOC2007)."""
    precision, recall = np.asarray(precision, dtype=float), np.asarray(recall, dtype=float)
    ap = 0.0
    for t in np.arange(0.0, 1.1, 0.1):
        above = recall >= t
        ap += (precision[above].max() if above.any() else 0.0) / 11.0
    return float(ap)


@dataclass
class GroundTruth:
    """Boxes of one image: (N, 4) xyxy float, (N,) labels, (N,) difficult flags."""

    image_id: str
    boxes: torch.Tensor
    labels: torch.Tensor
    difficult: torch.Tensor


def match_class(
    image_ids: np.ndarray,
    scores: np.ndarray,
    boxes: np.ndarray,
    gt: dict[str, tuple[torch.Tensor, torch.Tensor]],
    iou_threshold: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """TP and FP flags along the score ranking for one class's detections (arrays of image ids, scores,
    (N, 4) boxes); gt: image_id -> (boxes, difficult)."""
    n = len(scores)
    best_iou, best_gt = np.full(n, -1.0), np.zeros(n, dtype=np.int64)
    by_image: dict[str, list[int]] = defaultdict(list)
    for i, image_id in enumerate(image_ids.tolist()):
        by_image[image_id].append(i)
    for image_id, rows in by_image.items():  # IoUs of all of an image's detections at once
        if image_id in gt:
            ious = box_iou(torch.as_tensor(boxes[rows], dtype=torch.float64), gt[image_id][0].double())
            value, index = ious.max(1)
            best_iou[rows], best_gt[rows] = value.numpy(), index.numpy()
    order = np.argsort(-scores, kind="stable")
    tp, fp = np.zeros(n), np.zeros(n)
    matched: set[tuple[str, int]] = set()
    for rank, i in enumerate(order.tolist()):
        if best_iou[i] > iou_threshold:
            image_id, j = image_ids[i], int(best_gt[i])
            if bool(gt[image_id][1][j]):
                continue  # a difficult box: ignored
            if (image_id, j) in matched:
                fp[rank] = 1
            else:
                tp[rank] = 1
                matched.add((image_id, j))
        else:
            fp[rank] = 1  # no box of this class in the image, or IoU <= threshold
    return tp, fp


@dataclass
class Detections:
    """Detections as arrays: image ids (N,) str, labels (N,) int, scores (N,) float, boxes (N, 4) xyxy."""

    image_ids: np.ndarray
    labels: np.ndarray
    scores: np.ndarray
    boxes: np.ndarray

    @classmethod
    def concat(cls, parts: list[Detections]) -> Detections:
        if not parts:
            return cls(np.array([], dtype=object), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros((0, 4)))
        return cls(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in ("image_ids", "labels", "scores", "boxes"))
        )

    def __len__(self) -> int:
        return len(self.scores)


def voc07_map(
    detections: Detections, ground_truth: Iterable[GroundTruth], class_names: Sequence[str], iou_threshold: float = 0.5
) -> dict:
    """{"map": mean AP in %, "ap": {class: AP in % or None}, "n_gt", "n_detections"}; labels index
    `class_names` (0 = background, never evaluated)."""
    gt_by_class: dict[int, dict[str, tuple[torch.Tensor, torch.Tensor]]] = defaultdict(dict)
    n_positive: dict[int, int] = defaultdict(int)
    for g in ground_truth:
        for c in torch.unique(g.labels).tolist():
            sel = g.labels == c
            gt_by_class[c][g.image_id] = (g.boxes[sel].float(), g.difficult[sel].bool())
            n_positive[c] += int((~g.difficult[sel].bool()).sum())
    ap: dict[str, float | None] = {}
    for c in range(1, len(class_names)):
        if n_positive[c] == 0:
            ap[class_names[c]] = None  # no non-difficult box: undefined, left out of the mean
            continue
        sel = detections.labels == c
        tp, fp = match_class(
            detections.image_ids[sel], detections.scores[sel], detections.boxes[sel], gt_by_class[c], iou_threshold
        )
        tp, fp = np.cumsum(tp), np.cumsum(fp)
        recall = tp / n_positive[c]
        precision = tp / np.maximum(tp + fp, np.finfo(float).eps)
        ap[class_names[c]] = 100.0 * voc07_ap(precision, recall)
    defined = [v for v in ap.values() if v is not None]
    return {
        "map": float(np.mean(defined)) if defined else 0.0,
        "ap": ap,
        "n_gt": {class_names[c]: n_positive[c] for c in range(1, len(class_names))},
        "n_detections": len(detections),
    }
