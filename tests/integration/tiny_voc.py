"""A tiny VOC-layout detection set for tests: 6 trainval + 4 test canvases with the substitute set's 10 classes
(random-pixel objects and scenes: fast, no CIFAR needed)."""

import json
from pathlib import Path

import numpy as np

from tasks.voc import make_set as mds
from tasks.voc.data import SUBSTITUTE_MANIFEST


def write_tiny_voc(root: Path) -> Path:
    rng = np.random.default_rng(0)
    objects = rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8)
    labels = np.arange(20) % 10
    scenes = rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    folder = mds.prepare_folder(root)
    mds.write_split(folder, "trainval", range(1, 7), (objects, labels, scenes), seed=0, tag=1, log=lambda s: None)
    mds.write_split(folder, "test", range(7, 11), (objects, labels, scenes), seed=0, tag=2, log=lambda s: None)
    (folder / SUBSTITUTE_MANIFEST).write_text(json.dumps({"dataset": "voc-tiny"}))
    return root
