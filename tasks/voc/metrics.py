"""PASCAL VOC2007 detection metric: mAP at IoU 0.5 with the 11-point interpolated AP, difficult boxes ignored.

The VOC devkit's `VOCevaldet` rules, as pytorch-ssd's `eval_ssd.py` (which produced the paper's dense numbers)
applies them: detections ranked by score (stable sort); each takes its image's best-IoU box of its class: above
0.5 and difficult, ignored; above 0.5 and unmatched, a true positive; else a false positive. AP = mean over
t in `np.arange(0, 1.1, 0.1)` of the best precision at recall >= t; mAP over classes with a non-difficult box.
IoU is torchvision's `box_iou` on continuous coordinates (no +1 on widths), as in pytorch-ssd.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torchvision.ops import box_iou


def voc07_ap(precision: np.ndarray, recall: np.ndarray) -> float:
    """11-point interpolated average precision (VOC2007)."""
    precision, recall = np.asarray(precision, dtype=float), np.asarray(recall, dtype=float)
    return float(sum(precision[recall >= t].max(initial=0.0) / 11.0 for t in np.arange(0.0, 1.1, 0.1)))


@dataclass
class GroundTruth:
    """Boxes of one image: (N, 4) xyxy float, (N,) labels, (N,) bool difficult flags; its size (0: not given)."""

    image_id: str
    boxes: torch.Tensor
    labels: torch.Tensor
    difficult: torch.Tensor
    width: int = 0
    height: int = 0


def match_class(
    detections: Mapping[str, Mapping[str, torch.Tensor]], truth: Mapping[str, GroundTruth], c: int
) -> tuple[np.ndarray, np.ndarray]:
    """TP and FP flags along the score ranking of class `c`'s detections."""
    if not detections:
        return np.zeros(0), np.zeros(0)
    image_ids, scores, best_iou, best_gt, difficult = [], [], [], [], []
    for image_id, det in detections.items():  # IoUs of all of an image's detections at once
        keep = det["labels"] == c
        n, g = int(keep.sum()), truth.get(image_id)
        image_ids += [image_id] * n
        scores.append(det["scores"][keep].double())
        if g is None or not (g.labels == c).any():  # every detection a false positive
            best_iou.append(torch.full((n,), -1.0, dtype=torch.float64))
            best_gt.append(torch.zeros(n, dtype=torch.int64))
            difficult.append(torch.zeros(n, dtype=torch.bool))
        else:
            value, index = box_iou(det["boxes"][keep].double(), g.boxes[g.labels == c].double()).max(1)
            best_iou.append(value)
            best_gt.append(index)
            difficult.append(g.difficult[g.labels == c][index])
    order = torch.cat(scores).neg().numpy().argsort(kind="stable")
    ious, gt_index, hard = (torch.cat(x).numpy() for x in (best_iou, best_gt, difficult))
    tp, fp = np.zeros(len(order)), np.zeros(len(order))
    matched: set[tuple[str, int]] = set()
    for rank, i in enumerate(order.tolist()):
        if not ious[i] > 0.5:
            fp[rank] = 1  # no box of this class in the image, or IoU <= 0.5
        elif hard[i]:
            continue  # a difficult box: ignored
        elif (image_ids[i], int(gt_index[i])) in matched:
            fp[rank] = 1
        else:
            tp[rank] = 1
            matched.add((image_ids[i], int(gt_index[i])))
    return tp, fp


def voc07_map(
    detections: Mapping[str, Mapping[str, torch.Tensor]],
    ground_truth: Iterable[GroundTruth],
    class_names: Sequence[str],
) -> dict:
    """{"map": mean AP in %, "ap": {class: AP in % or None}, "n_gt", "n_detections"} of detections per image id
    ({"boxes", "scores", "labels"}, as `tasks.voc.ssd.postprocess` gives them); labels index `class_names`
    (0 = background, never evaluated)."""
    truth = {g.image_id: g for g in ground_truth}
    ap: dict[str, float | None] = {}
    n_gt = {}
    for c, name in enumerate(class_names[1:], 1):
        n_gt[name] = sum(int((~g.difficult[g.labels == c]).sum()) for g in truth.values())
        if n_gt[name] == 0:
            ap[name] = None  # no non-difficult box: undefined, left out of the mean
            continue
        tp, fp = match_class(detections, truth, c)
        tp, fp = np.cumsum(tp), np.cumsum(fp)
        precision = tp / np.maximum(tp + fp, np.finfo(float).eps)
        ap[name] = 100.0 * voc07_ap(precision, tp / n_gt[name])
    defined = [v for v in ap.values() if v is not None]
    return {
        "map": float(np.mean(defined)) if defined else 0.0,
        "ap": ap,
        "n_gt": n_gt,
        "n_detections": sum(len(d["scores"]) for d in detections.values()),
    }
