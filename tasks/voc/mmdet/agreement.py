"""mmdet's VOC metric on detections the suite made, for checking the suite's VOC07 mAP against mmdet's.

The ground truth is mmdet's own reading of the folder (VOCDataset: its XML parser, its difficult flags), the
detections the suite's arrays (labels 1..C with 0 = background, boxes in original-image pixels). Besides
VOCMetric as mmdet configures it (box widths with the VOC devkit's legacy +1), mmdet's `eval_map` is also run
without the +1, the suite's (and pytorch-ssd's) convention, so a difference can be traced to its cause.
"""

from __future__ import annotations

import numpy as np
import torch
from mmdet.evaluation import VOCMetric
from mmdet.evaluation.functional import eval_map

from tasks.voc.metrics import Detections
from tasks.voc.mmdet.detector import quiet_mmengine


def _instances(rows: list[dict]) -> dict[str, torch.Tensor]:
    boxes = torch.tensor([r["bbox"] for r in rows], dtype=torch.float32).reshape(-1, 4)
    return {"bboxes": boxes, "labels": torch.tensor([r["bbox_label"] for r in rows], dtype=torch.int64)}


def mmdet_voc_map(detections: Detections, dataset) -> dict[str, float]:
    """{"vocmetric": VOCMetric's mAP, "no_plus_one": eval_map without the legacy +1}, as fractions, over the
    images of an mmdet VOCDataset (built in test mode)."""
    metric = VOCMetric(metric="mAP", eval_mode="11points")
    metric.dataset_meta = dataset.metainfo
    image_ids = np.asarray(detections.image_ids).astype(str)
    samples = []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        sel = image_ids == str(info["img_id"])
        samples.append(
            {
                "gt_instances": _instances([r for r in info["instances"] if not r["ignore_flag"]]),
                "ignored_instances": _instances([r for r in info["instances"] if r["ignore_flag"]]),
                "pred_instances": {
                    "bboxes": torch.as_tensor(detections.boxes[sel], dtype=torch.float32).reshape(-1, 4),
                    "scores": torch.as_tensor(detections.scores[sel], dtype=torch.float32),
                    "labels": torch.as_tensor(detections.labels[sel] - 1, dtype=torch.int64),
                },
            }
        )
    with quiet_mmengine():
        metric.process({}, samples)
        legacy = metric.compute_metrics(metric.results)["mAP"]
        gts, preds = zip(*metric.results)
        plain, _ = eval_map(list(preds), list(gts), iou_thr=0.5, dataset=list(dataset.metainfo["classes"]),
                            eval_mode="11points", use_legacy_coordinate=False, logger="silent")  # fmt: skip
    return {"vocmetric": float(legacy), "no_plus_one": float(plain)}
