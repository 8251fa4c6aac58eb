"""Detection folders as mmdet datasets, calibration images through the config's own test pipeline, and mmdet's
metric for the folder through mmengine's test loop. Two layouts, found from the data root:
    VOC    <root>/VOCdevkit/VOC2007/ (or <root>/VOC2007/, or <root>): calibration from trainval, evaluation on
           test, classes from labels.txt or VOC's 20; mmdet's VOCMetric (VOC07 11-point mAP@0.5)
    COCO   <root>/annotations/instances_<split>.json, images in <root>/<split>/: calibration from train*,
           evaluation on val* (else test*), classes from the json; mmdet's CocoMetric
The config supplies the pipeline, never the paths.
"""

from __future__ import annotations

import copy
import json
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.runner import Runner
from torch import nn

from fcpts.core.batch_workers import default_workers
from tasks.grid.paths import DataNotFoundError
from tasks.voc.data import DetectionImages, read_class_names, read_substitute_manifest, voc2007_dir
from tasks.voc.mmdet.detector import quiet_mmengine


@dataclass(frozen=True)
class Layout:
    """Where a detection folder's splits are and how mmdet reads and scores them."""

    kind: str  # "voc" or "coco"
    root: Path  # the VOC2007 folder, or the COCO root
    classes: tuple[str, ...]
    calibration_split: str
    eval_split: str
    manifest: dict | None = None  # the substitute set's description (tasks.voc.make_set)

    def source(self, split: str) -> dict:
        """The keys of an mmdet dataset config that say what it reads: type, paths, classes."""
        if self.kind == "voc":
            paths = {
                "type": "VOCDataset",
                "data_root": str(self.root.parent),
                "ann_file": f"{self.root.name}/ImageSets/Main/{split}.txt",
                "data_prefix": {"sub_data_root": f"{self.root.name}/"},
            }
        else:
            paths = {
                "type": "CocoDataset",
                "data_root": str(self.root),
                "ann_file": f"annotations/instances_{split}.json",
                "data_prefix": {"img": f"{split}/"},
            }
        return {**paths, "metainfo": {"classes": self.classes}}

    def evaluator_cfg(self, coco_ann_file: str | None = None) -> dict:
        if self.kind == "voc":
            return {"type": "VOCMetric", "metric": "mAP", "eval_mode": "11points"}
        ann = coco_ann_file or str(self.root / "annotations" / f"instances_{self.eval_split}.json")
        return {"type": "CocoMetric", "ann_file": ann, "metric": "bbox"}

    def describe(self) -> dict:
        return {
            "root": str(self.root),
            "layout": self.kind,
            "calibration_split": self.calibration_split,
            "eval_split": self.eval_split,
            "classes": list(self.classes),
        }


def find_layout(data_root: Path) -> Layout:
    """The layout of a data root: COCO when it holds annotations/instances_*.json, else VOC."""
    annotations = sorted((data_root / "annotations").glob("instances_*.json"))
    if annotations:
        splits = [p.stem.removeprefix("instances_") for p in annotations]
        train = [s for s in splits if s.startswith("train")]
        held_out = [s for s in splits if s.startswith("val")] or [s for s in splits if s.startswith("test")]
        if not train or not held_out:
            raise DataNotFoundError(
                f"{data_root}/annotations has {', '.join(p.name for p in annotations)}: a COCO-layout folder needs "
                "instances_train*.json (calibration) and instances_val*.json (evaluation)"
            )
        categories = json.loads((data_root / "annotations" / f"instances_{held_out[0]}.json").read_text())
        classes = tuple(c["name"] for c in sorted(categories["categories"], key=lambda c: c["id"]))
        return Layout("coco", data_root, classes, train[0], held_out[0])
    folder = voc2007_dir(data_root)
    return Layout("voc", folder, read_class_names(folder)[1:], "trainval", "test", read_substitute_manifest(folder))


def point_at(dataset_cfg: dict, layout: Layout, split: str, limit: int | None = None) -> dict:
    """A config's dataset (inside its wrappers: RepeatDataset, ...) reading `split` of `layout` instead, with
    its own pipeline and filters kept."""
    out = copy.deepcopy(dict(dataset_cfg))
    inner = out
    while "dataset" in inner:
        inner["dataset"] = dict(inner["dataset"])
        inner = inner["dataset"]
    for key in ("type", "data_root", "ann_file", "data_prefix", "metainfo", "indices"):
        inner.pop(key, None)
    inner.update(layout.source(split))
    if limit is not None:
        inner["indices"] = limit  # mmengine's first-N subset
    return out


def config_test_pipeline(cfg: Config) -> list:
    """The config's test pipeline (its test_dataloader's dataset, else `test_pipeline`)."""
    dataset = cfg.get("test_dataloader", {}).get("dataset", {})
    while "pipeline" not in dataset and "dataset" in dataset:  # wrappers (ConcatDataset, ...)
        dataset = dataset["dataset"]
    pipeline = dataset.get("pipeline") or cfg.get("test_pipeline")
    if not pipeline:
        raise ValueError("the config has no test pipeline (test_dataloader.dataset.pipeline or test_pipeline)")
    return [dict(t) for t in pipeline]


def build_dataset(layout: Layout, split: str, pipeline: list):
    """One split as an mmdet dataset in test mode, every image in the split's order; the pipeline's annotation
    loaders left out, so calibration never reads a label."""
    from mmdet.registry import DATASETS

    pipeline = [t for t in pipeline if t.get("type") not in ("LoadAnnotations", "LoadPanopticAnnotations")]
    return DATASETS.build(point_at({"test_mode": True, "pipeline": pipeline}, layout, split))


class PipelineImages(DetectionImages):
    """Calibration images as the detector sees them: the test pipeline without annotations, then the detector's
    data preprocessor; (3, H, W) float, padded at the bottom and right to the largest (as a batch would be) after
    an optional flip."""

    def __init__(self, dataset, preprocessor: nn.Module, indices: list[int], flip: bool = False):
        self.dataset, self.preprocessor = dataset, preprocessor
        self.indices, self.flip = list(indices), flip
        self.pad_value = float(getattr(preprocessor, "pad_value", 0))
        self._cache = None  # the canvas first, then the cache if the set fits
        # a resize that ignores the aspect ratio makes every image the same size: the first one's
        fixed = any(getattr(t, "keep_ratio", True) is False for t in dataset.pipeline.transforms)
        sizes = [self.image(i).shape[-2:] for i in (self.indices[:1] if fixed else self.indices)]
        self.canvas = max(h for h, _ in sizes), max(w for _, w in sizes)
        self._cache = {} if len(self.indices) * 3 * self.canvas[0] * self.canvas[1] * 4 < 2**31 else None

    @torch.no_grad()
    def load(self, i: int) -> torch.Tensor:
        item = self.dataset[i]
        return self.preprocessor({"inputs": [item["inputs"]], "data_samples": None}, False)["inputs"][0].cpu()

    def __getitem__(self, k: int) -> tuple[torch.Tensor, int]:
        x, i = super().__getitem__(k)
        h, w = x.shape[-2:]
        if (h, w) != self.canvas:
            x = F.pad(x, (0, self.canvas[1] - w, 0, self.canvas[0] - h), value=self.pad_value)
        return x, i


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
        ann_file = None
        if layout.kind == "coco" and limit:  # CocoMetric scores every image of its file: a partial file then
            source = json.loads((layout.root / "annotations" / f"instances_{layout.eval_split}.json").read_text())
            source["images"] = source["images"][:limit]
            keep = {im["id"] for im in source["images"]}
            source["annotations"] = [a for a in source["annotations"] if a["image_id"] in keep]
            ann_file = str(Path(work_dir) / "instances_subset.json")
            Path(ann_file).write_text(json.dumps(source))
        loader = {
            "batch_size": batch_size,
            "num_workers": default_workers() if workers is None else workers,  # as the other tasks' loaders
            "persistent_workers": False,
            "drop_last": False,
            "sampler": {"type": "DefaultSampler", "shuffle": False},
            "dataset": point_at({"test_mode": True, "pipeline": pipeline}, layout, layout.eval_split, limit),
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
        metric = "mmdet VOCMetric: VOC07 11-point AP at IoU >= 0.5, difficult ignored, legacy +1 box widths"
    else:
        out = {"map": 100.0 * float(metrics["coco/bbox_mAP"]), "map50": 100.0 * float(metrics["coco/bbox_mAP_50"])}
        metric = "mmdet CocoMetric (pycocotools): bbox AP at IoU 0.50:0.95 and 0.50"
    return {**out, "mmdet_metrics": metrics, "n_images": n_images, "metric": metric}
