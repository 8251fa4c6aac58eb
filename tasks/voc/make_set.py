"""A small detection set in the PASCAL VOC layout from real images: CIFAR-10 objects on real scene canvases.

    python -m tasks.voc.make_set --out data/voc-cifar          # 4,000 trainval + 500 test images

The CPU stand-in for VOC (Table 5's substitute row): canvases of 160-240 x 120-200 px cut from CIFAR-100 scenes,
1-3 CIFAR-10 objects pasted at known boxes (side 20-80 px, overlapping by IoU <= 0.1), objects under 28 px
`difficult`; trainval from the CIFAR training splits, test from the test splits. Written as
`<out>/VOCdevkit/VOC2007/` plus `substitute.json`; image k of a split depends only on (seed, split, k).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tasks.grid import cli
from tasks.grid.help import command_parser
from tasks.grid.paths import REPO_ROOT, resolve_data_root

if TYPE_CHECKING:  # the generator imports torch when it runs: --help needs none of it
    import torch

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
# CIFAR-100 fine labels used as backgrounds (official label order): cloud, forest, mountain, plain, sea, road.
SCENE_LABELS = {"cloud": 23, "forest": 33, "mountain": 49, "plain": 60, "sea": 71, "road": 68}
DEFAULT_OUT = REPO_ROOT / "data" / "voc-cifar"


def _resize(img: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """(3, H, W) uint8 -> (3, h, w) uint8, bilinear (antialiased when shrinking)."""
    import torch
    import torch.nn.functional as F

    out = F.interpolate(img[None].float(), size=(h, w), mode="bilinear", align_corners=False, antialias=True)
    return out[0].round().clamp(0, 255).to(torch.uint8)


def make_image(rng: np.random.Generator, objects: np.ndarray, labels: np.ndarray, scenes: np.ndarray):
    """One canvas with 1-3 pasted objects: (image (3, H, W) uint8, [(label, x1, y1, x2, y2, difficult)])
    with boxes in pixel coordinates, x2/y2 exclusive."""
    import torch
    from torchvision.ops import box_iou

    width, height = int(rng.integers(160, 241)), int(rng.integers(120, 201))
    scene = torch.as_tensor(scenes[rng.integers(len(scenes))]).permute(2, 0, 1)
    # a random crop of the scene (at least half of it), upscaled to the canvas, with a brightness jitter
    ch, cw = int(rng.integers(16, 33)), int(rng.integers(16, 33))
    y0, x0 = int(rng.integers(0, 33 - ch)), int(rng.integers(0, 33 - cw))
    canvas = _resize(scene[:, y0 : y0 + ch, x0 : x0 + cw], height, width).float()
    canvas = (canvas * rng.uniform(0.8, 1.2)).clamp(0, 255)
    if rng.random() < 0.5:
        canvas = canvas.flip(-1)
    placed: list[list[float]] = []
    out = []
    for _ in range(int(rng.integers(1, 4))):
        for _attempt in range(20):
            side = float(np.exp(rng.uniform(np.log(20), np.log(80))))
            aspect = float(np.exp(rng.uniform(np.log(0.8), np.log(1.25))))
            w = round(min(side * float(np.sqrt(aspect)), width))
            h = round(min(side / float(np.sqrt(aspect)), height))
            x, y = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
            box = [x, y, x + w, y + h]
            if not placed or box_iou(torch.tensor([box], dtype=torch.float), torch.tensor(placed)).max() <= 0.1:
                break
        else:
            continue  # no room: fewer objects
        k = int(rng.integers(len(objects)))
        obj = torch.as_tensor(objects[k]).permute(2, 0, 1)
        if rng.random() < 0.5:
            obj = obj.flip(-1)
        canvas[:, y : y + h, x : x + w] = _resize(obj, h, w).float()
        placed.append([float(v) for v in box])
        out.append((int(labels[k]), x, y, x + w, y + h, min(w, h) < 28))
    return canvas.round().clamp(0, 255).to(torch.uint8), out


def annotation_xml(image_id: str, width: int, height: int, objects) -> bytes:
    """VOC2007 annotation; bndbox in 1-based inclusive pixels (xmin = x1 + 1, xmax = x2)."""
    root = ET.Element("annotation")
    ET.SubElement(root, "folder").text = "VOC2007"
    ET.SubElement(root, "filename").text = f"{image_id}.jpg"
    source = ET.SubElement(root, "source")
    ET.SubElement(source, "database").text = "CIFAR-10 objects on CIFAR-100 scenes (tasks.make_detection_set)"
    size = ET.SubElement(root, "size")
    for tag, v in (("width", width), ("height", height), ("depth", 3)):
        ET.SubElement(size, tag).text = str(v)
    ET.SubElement(root, "segmented").text = "0"
    for label, x1, y1, x2, y2, difficult in objects:
        obj = ET.SubElement(root, "object")
        ET.SubElement(obj, "name").text = CIFAR10_CLASSES[label]
        ET.SubElement(obj, "pose").text = "Unspecified"
        ET.SubElement(obj, "truncated").text = "0"
        ET.SubElement(obj, "difficult").text = "1" if difficult else "0"
        bb = ET.SubElement(obj, "bndbox")
        for tag, v in (("xmin", x1 + 1), ("ymin", y1 + 1), ("xmax", x2), ("ymax", y2)):
            ET.SubElement(bb, tag).text = str(int(v))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8")


def _scenes(root: Path, split: str) -> np.ndarray:
    from tasks.grid.cifar_data import load_cifar

    x, y = load_cifar(root, "cifar100", split)
    return x[np.isin(y, list(SCENE_LABELS.values()))]


def write_split(folder: Path, split: str, ids: range, sources: tuple, seed: int, tag: int, log=print) -> dict:
    """Images `ids` of one split, the k-th made from the generator seeded (seed, tag, k) and `sources` (CIFAR-10
    objects, their labels, scene images); the split's counts for the manifest."""
    from PIL import Image

    from fcpts.core.io import write_text_atomic

    placed = []
    for k, i in enumerate(ids):
        image, objs = make_image(np.random.default_rng([seed, tag, k]), *sources)
        image_id = f"{i:06d}"
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(folder / "JPEGImages" / f"{image_id}.jpg", quality=90)
        xml = annotation_xml(image_id, image.shape[2], image.shape[1], objs)
        (folder / "Annotations" / f"{image_id}.xml").write_bytes(xml)
        placed += objs
        if (k + 1) % 1000 == 0:
            log(f"{split}: {k + 1}/{len(ids)}")
    write_text_atomic(folder / "ImageSets" / "Main" / f"{split}.txt", "".join(f"{i:06d}\n" for i in ids))
    per_class = Counter(CIFAR10_CLASSES[o[0]] for o in placed)
    return {
        "images": len(ids),
        "objects": len(placed),
        "difficult": sum(o[5] for o in placed),
        "objects_per_class": {c: per_class[c] for c in CIFAR10_CLASSES},
    }


def prepare_folder(out: Path) -> Path:
    from fcpts.core.io import write_text_atomic

    folder = out / "VOCdevkit" / "VOC2007"
    for sub in ("JPEGImages", "Annotations", "ImageSets/Main"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / ".gitignore", "# generated by tasks.voc.make_set; regenerable, not committed\n*\n")
    write_text_atomic(folder / "labels.txt", ",".join(CIFAR10_CLASSES) + "\n")
    return folder


def make_set(
    out: Path,
    data_root: Path,
    n_trainval: int = 4000,
    n_test: int = 500,
    seed: int = 0,
    log=print,
    trainval_prefix: int | None = None,
) -> Path:
    """The set; `trainval_prefix` writes only the first that many trainval images, the test split and every
    image id as in the whole set, for a check that calibrates on a few images but evaluates on real test ones."""
    from fcpts.core.io import write_text_atomic
    from tasks.grid.cifar_data import load_cifar
    from tasks.voc.data import SUBSTITUTE_MANIFEST

    folder = prepare_folder(out)
    counts, first_id = {}, 1
    for split, n, cifar_split, tag in (("trainval", n_trainval, "train", 1), ("test", n_test, "test", 2)):
        written = n if split == "test" or trainval_prefix is None else min(trainval_prefix, n)
        sources = (*load_cifar(data_root, "cifar10", cifar_split), _scenes(data_root, cifar_split))
        counts[split] = write_split(folder, split, range(first_id, first_id + written), sources, seed, tag, log)
        counts[split].update(object_source=f"cifar10/{cifar_split}", background_source=f"cifar100/{cifar_split}")
        if written < n:
            counts[split]["prefix_of"] = n
        first_id += n
    manifest = {
        "dataset": "voc-cifar10",
        "generator": "tasks.make_detection_set",  # the set's name as first published: part of its identity
        "version": 1,
        "seed": seed,
        "jpeg_quality": 90,
        "classes": list(CIFAR10_CLASSES),
        "background_classes": list(SCENE_LABELS),
        "data_root": str(data_root),
        "splits": counts,
        "note": "substitute for PASCAL VOC2007 on a CPU; not comparable to VOC numbers",
    }
    write_text_atomic(folder / SUBSTITUTE_MANIFEST, json.dumps(manifest, indent=1) + "\n")
    log(f"wrote {counts['trainval']['images']} trainval + {n_test} test images to {folder}")
    return folder


def parse_args(argv=None) -> argparse.Namespace:
    p = command_parser("python -m tasks.voc.make_set", __doc__)
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument(
        "--data-root", help="folder with cifar10/ and cifar100/ (default: $FCPTS_DATA_ROOT, then ../shared/data)"
    )
    p.add_argument("--trainval", type=int, default=4000)
    p.add_argument("--test", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


main = cli.script_main(
    parse_args, lambda a: make_set(Path(a.out), resolve_data_root(a.data_root), a.trainval, a.test, a.seed)
)


if __name__ == "__main__":
    sys.exit(main())
