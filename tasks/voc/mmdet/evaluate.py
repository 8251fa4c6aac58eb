"""mmdet's own metric for the dataset, computed by mmengine's test loop on a (sparse) detector."""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

from mmengine.runner import Runner
from torch import nn

from fcpts.core.batch_workers import default_workers
from tasks.voc.mmdet.data import Layout
from tasks.voc.mmdet.detector import quiet_mmengine


def coco_subset(layout: Layout, limit: int, folder: Path) -> str:
    """The evaluation split's annotation file cut to its first `limit` images (CocoMetric scores every
    image of its file, so a partial evaluation needs a partial file)."""
    source = json.loads((layout.root / "annotations" / f"instances_{layout.eval_split}.json").read_text())
    keep = {im["id"] for im in source["images"][:limit]}
    source["images"] = source["images"][:limit]
    source["annotations"] = [a for a in source["annotations"] if a["image_id"] in keep]
    path = folder / "instances_subset.json"
    path.write_text(json.dumps(source))
    return str(path)


def evaluate_detector(
    detector: nn.Module,
    layout: Layout,
    pipeline: list,
    limit: int | None = None,
    batch_size: int = 16,
    workers: int | None = None,
) -> dict:
    """{"map50": %, ("map": % for COCO), "mmdet_metrics": the evaluator's dict, "n_images", "metric"}."""
    was_training = detector.training
    device = next(detector.parameters()).device  # mmengine's Runner moves the model to its own choice of device
    with tempfile.TemporaryDirectory(prefix="fcpts-mmdet-eval-") as work_dir:
        ann_file = coco_subset(layout, limit, Path(work_dir)) if layout.kind == "coco" and limit else None
        loader = {
            "batch_size": batch_size,
            "num_workers": default_workers() if workers is None else workers,  # as the other tasks' loaders
            "persistent_workers": False,
            "drop_last": False,
            "sampler": {"type": "DefaultSampler", "shuffle": False},
            "dataset": layout.dataset_cfg(layout.eval_split, pipeline, limit),
        }
        with quiet_mmengine():
            runner = Runner(
                model=detector,
                work_dir=work_dir,
                experiment_name=f"fcpts-eval-{uuid.uuid4().hex[:8]}",
                test_dataloader=loader,
                test_evaluator=layout.evaluator_cfg(ann_file),
                test_cfg={"type": "TestLoop"},
                default_scope="mmdet",
                log_level="WARNING",
                default_hooks={"logger": None, "checkpoint": None},
            )
            metrics = dict(runner.test())
            n_images = len(runner.test_dataloader.dataset)
    detector.to(device).train(was_training)
    if layout.kind == "voc":
        out = {"map50": 100.0 * float(metrics["pascal_voc/mAP"])}
    else:
        out = {"map": 100.0 * float(metrics["coco/bbox_mAP"]), "map50": 100.0 * float(metrics["coco/bbox_mAP_50"])}
    return {**out, "mmdet_metrics": metrics, "n_images": n_images, "metric": layout.metric_description()}
