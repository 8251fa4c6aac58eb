"""Integration tests run on the real data under ../shared/data (CIFAR images and pretrained weights)."""

import json

import numpy as np
import pytest

from tests.conftest import require_data


@pytest.fixture(autouse=True)
def _real_cifar():
    require_data("cifar10", "CIFAR-10")
    require_data("weights/cifar10", "the pretrained CIFAR-10 ResNets")


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
    """6 trainval + 4 test canvases in the VOC layout (random-pixel 'objects' and scenes: fast, no CIFAR)."""
    from tasks.detection import make_set as mds
    from tasks.detection.data import SUBSTITUTE_MANIFEST

    root = tmp_path_factory.mktemp("voc")
    rng = np.random.default_rng(0)
    objects = rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8)
    labels = np.arange(20) % 10
    scenes = rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    folder = mds.prepare_folder(root)
    mds.write_split(folder, "trainval", 6, objects, labels, scenes, seed=0, tag=1, first_id=1, log=lambda s: None)
    mds.write_split(folder, "test", 4, objects, labels, scenes, seed=0, tag=2, first_id=7, log=lambda s: None)
    (folder / SUBSTITUTE_MANIFEST).write_text(json.dumps({"dataset": "voc-tiny"}))
    return root
