"""PASCAL VOC reader (`<root>/VOCdevkit/VOC2007/`: JPEGImages/, Annotations/, ImageSets/Main/<split>.txt, optional
labels.txt with pytorch-ssd's comma-separated class names) and the detectors' image pipeline. Boxes are 0-based (XML
coordinates minus 1, as pytorch-ssd reads them), label 0 = BACKGROUND, `difficult` flags kept.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import Dataset

from tasks.grid.paths import ENV_DATA_ROOT, DataNotFoundError
from tasks.grid.training import batch_indices
from tasks.voc.metrics import GroundTruth
from tasks.voc.ssd import VOC_CLASSES, SSDConfig, encode_targets

SUBSTITUTE_MANIFEST = "substitute.json"  # written by tasks.voc.make_set


def voc2007_dir(data_root: Path) -> Path:
    """The VOC2007 folder under a data root: root/VOCdevkit/VOC2007, root/VOC2007 or root itself."""
    candidates = [data_root / "VOCdevkit" / "VOC2007", data_root / "VOC2007", data_root]
    for c in candidates:
        if (c / "Annotations").is_dir() or (c / "JPEGImages").is_dir():
            return c
    raise DataNotFoundError(
        "PASCAL VOC2007 not found: looked for "
        + ", ".join(f"{c}/Annotations" for c in candidates)
        + f". Pass --data-root DIR (or set {ENV_DATA_ROOT}=DIR) to the folder that holds VOCdevkit/VOC2007 "
        "(JPEGImages/, Annotations/, ImageSets/Main/test.txt); the CPU substitute set is made with "
        "`python -m tasks.voc.make_set --out DIR`."
    )


def read_class_names(folder: Path) -> tuple[str, ...]:
    """('BACKGROUND', classes...) from labels.txt (comma-separated, pytorch-ssd) or VOC's 20 classes."""
    path = folder / "labels.txt"
    if not path.is_file():
        return VOC_CLASSES
    names = [n.strip().replace(" ", "") for n in path.read_text().replace("\n", ",").split(",") if n.strip()]
    if not names:
        raise ValueError(f"{path} names no classes")
    return ("BACKGROUND", *names)


def read_image_ids(folder: Path, split: str) -> list[str]:
    path = folder / "ImageSets" / "Main" / f"{split}.txt"
    if not path.is_file():
        raise DataNotFoundError(
            f"{path} is missing: the VOC2007 split '{split}' lists its image ids there. "
            f"Check --data-root (now pointing at {folder}); VOC2007's test split comes in "
            "VOCtest_06-Nov-2007.tar, trainval in VOCtrainval_06-Nov-2007.tar."
        )
    ids = [line.strip().split()[0] for line in path.read_text().splitlines() if line.strip()]
    if not ids:
        raise ValueError(f"{path} lists no images")
    return ids


def parse_annotation(path: Path, class_index: dict[str, int]) -> GroundTruth:
    """An image's boxes (float32 0-based xyxy), labels (int64 1..C-1), difficult flags and size."""
    if not path.is_file():
        raise DataNotFoundError(f"annotation {path} is missing (listed in the split file); check --data-root")
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise ValueError(f"{path} is not valid XML ({e})") from e

    def number(node, tag: str) -> float:
        el = node.find(tag)
        if el is None or el.text is None:
            raise ValueError(f"{path}: <{tag}> missing")
        return float(el.text)

    size = root.find("size")
    width, height = (int(number(size, t)) for t in ("width", "height")) if size is not None else (0, 0)
    boxes, labels, difficult = [], [], []
    for obj in root.findall("object"):
        name = (obj.findtext("name") or "").strip().lower()
        if name not in class_index:
            raise ValueError(
                f"{path}: object class {name!r} is not one of {sorted(class_index)}; "
                "give the dataset a labels.txt with its classes"
            )
        bb = obj.find("bndbox")
        if bb is None:
            raise ValueError(f"{path}: object {name!r} has no <bndbox>")
        boxes.append([number(bb, t) - 1.0 for t in ("xmin", "ymin", "xmax", "ymax")])
        labels.append(class_index[name])
        difficult.append((obj.findtext("difficult") or "0").strip() not in ("", "0"))
    return GroundTruth(
        path.stem,
        torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
        torch.tensor(labels, dtype=torch.int64),
        torch.tensor(difficult, dtype=torch.bool),
        width,
        height,
    )


class VOCDetection:
    """One split of a VOC-layout folder: ids, class names, annotations (parsed once), images, and the substitute
    set's manifest (None: the real VOC2007)."""

    def __init__(self, folder: Path, split: str = "test", limit: int | None = None):
        self.folder = Path(folder)
        self.class_names = read_class_names(self.folder)
        index = {n.lower(): i for i, n in enumerate(self.class_names) if i > 0}
        self.ids = read_image_ids(self.folder, split)[:limit]
        self.annotations = [parse_annotation(self.folder / "Annotations" / f"{i}.xml", index) for i in self.ids]
        self.manifest = read_substitute_manifest(self.folder)
        if self.ids and not (self.folder / "JPEGImages" / f"{self.ids[0]}.jpg").is_file():
            raise DataNotFoundError(f"{self.folder / 'JPEGImages' / self.ids[0]}.jpg is missing; check --data-root")

    def __len__(self) -> int:
        return len(self.ids)

    def image(self, i: int) -> torch.Tensor:
        """(3, H, W) uint8 RGB."""
        path = self.folder / "JPEGImages" / f"{self.ids[i]}.jpg"
        if not path.is_file():
            raise DataNotFoundError(f"{path} is missing; check --data-root")
        with Image.open(path) as im:  # Pillow: libjpeg, as OpenCV in pytorch-ssd
            return torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1).contiguous()


def read_substitute_manifest(folder: Path) -> dict | None:
    """The substitute set's description in `folder` (None: the real VOC2007); its `dataset` names the records'
    folder, so it must be a plain name (no path separator, no `..`)."""
    path = Path(folder) / SUBSTITUTE_MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path} is damaged ({e}); make the set again with python -m tasks.voc.make_set") from None
    name = manifest.get("dataset") if isinstance(manifest, dict) else None
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or ".." in name:
        raise ValueError(
            f"{path}: its 'dataset' must be a plain name (letters, digits, '.', '_', '-'; no path separator or "
            f"'..'), not {name!r}; fix it or make the set again with python -m tasks.voc.make_set"
        )
    return manifest


def preprocess(image_uint8: torch.Tensor, size: int, mean: float = 127.0, std: float = 128.0) -> torch.Tensor:
    """(3, H, W) uint8 RGB -> float (3, size, size): bilinear resize, (x - 127) / 128."""
    x = F.interpolate(image_uint8[None].float(), size=(size, size), mode="bilinear", align_corners=False)
    return (x[0] - mean) / std


class DetectionImages(Dataset):
    """Preprocessed images of a split, as (image, index), kept in memory while they fit in 2 GiB; `load` makes one
    (mmdet's PipelineImages loads through a config's pipeline instead)."""

    def __init__(self, data: VOCDetection, size: int, indices: list[int] | None = None, flip: bool = False):
        self.data, self.size, self.flip = data, size, flip
        self.indices = list(range(len(data))) if indices is None else list(indices)
        self._cache: dict[int, torch.Tensor] | None = {} if len(self.indices) * size**2 * 12 < 2**31 else None

    def load(self, i: int) -> torch.Tensor:
        return preprocess(self.data.image(i), self.size)

    def image(self, i: int) -> torch.Tensor:
        if self._cache is None:
            return self.load(i)
        if i not in self._cache:
            self._cache[i] = self.load(i)
        return self._cache[i]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: int) -> tuple[torch.Tensor, int]:
        i = self.indices[k]
        x = self.image(i)
        if self.flip and torch.rand(()) < 0.5:  # weak augmentation for the distillation methods
            x = x.flip(-1)
        return x, i


class DetectionTrainSet:
    """(image (3, S, S) float, regression targets (A, 4), prior labels (A,)) with SSD augmentation."""

    def __init__(self, data: VOCDetection, config: SSDConfig, augment: bool = True, max_zoom_out: float = 2.0):
        import torchvision.transforms.v2 as T

        self.data, self.config = data, config
        self.priors = config.priors()
        self.augment = (
            T.Compose(
                [
                    T.RandomPhotometricDistort(p=0.5),
                    T.RandomZoomOut(fill=int(config.image_mean), side_range=(1.0, max_zoom_out), p=0.5),
                    T.RandomIoUCrop(),
                    T.RandomHorizontalFlip(),
                    T.SanitizeBoundingBoxes(min_size=1.0),
                ]
            )
            if augment
            else None
        )

    def __len__(self) -> int:
        return len(self.data)

    def sample(self, i: int, seed: int):
        from torchvision import tv_tensors

        ann = self.data.annotations[i]
        keep = ~ann.difficult
        image = self.data.image(i)
        h, w = image.shape[-2:]
        boxes, labels = ann.boxes[keep], ann.labels[keep]
        if self.augment is not None and len(boxes):
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(seed)  # the host RNG only: a GPU's is not forked
                out = self.augment(
                    {
                        "image": tv_tensors.Image(image),
                        "boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(h, w)),
                        "labels": labels,
                    }
                )
            image, boxes, labels = out["image"], out["boxes"], out["labels"]  # tv_tensors: plain tensors' results
            h, w = image.shape[-2:]
        rel = boxes / torch.tensor([w, h, w, h], dtype=torch.float32)
        targets, prior_labels = encode_targets(rel, labels, self.priors, self.config)
        return preprocess(image, self.config.image_size), targets, prior_labels


def batch_for_step(train_set: DetectionTrainSet, step: int, batch_size: int, seed: int):
    """The batch of a step, a function of (seed, step) only: epoch-seeded shuffle, per-sample seeds."""
    idx = batch_indices(len(train_set), step, batch_size, seed).tolist()
    items = [train_set.sample(i, seed=(seed * 7_919 + step) * 1_000 + k) for k, i in enumerate(idx)]
    return tuple(torch.stack(column) for column in zip(*items))  # images, regression targets, prior labels


def one_thread(_worker_id: int) -> None:
    """A batch worker's torch threads: one, so workers and the training step do not oversubscribe the cores."""
    torch.set_num_threads(1)
