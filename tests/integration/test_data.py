"""CIFAR readers: the torchvision ("python version") layout next to this workplace's archives."""

import pickle

import numpy as np
import pytest

from tasks.grid.cifar_data import load_cifar
from tasks.grid.paths import DataNotFoundError, calibration_indices, resolve_data_root


def write_batch(path, x, y, key):
    data = x.transpose(0, 3, 1, 2).reshape(len(x), -1)  # official layout: N x 3072, channel-major
    with open(path, "wb") as f:
        pickle.dump({"data": data, key: list(map(int, y))}, f)


def test_torchvision_layout_reads_the_same_pixels(tmp_path):
    x, y = load_cifar(resolve_data_root(), "cifar10", "test")
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    write_batch(folder / "test_batch", x[:50], y[:50], "labels")
    for i in range(1, 6):
        write_batch(folder / f"data_batch_{i}", x[10 * i : 10 * i + 10], y[10 * i : 10 * i + 10], "labels")
    xt, yt = load_cifar(tmp_path, "cifar10", "test")
    assert np.array_equal(xt, x[:50]) and np.array_equal(yt, y[:50])
    xtr, _ = load_cifar(tmp_path, "cifar10", "train")
    assert xtr.shape == (50, 32, 32, 3)


def test_cifar100_python_layout_uses_fine_labels(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    x = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    write_batch(folder / "test", x, [5, 99, 0, 42], "fine_labels")
    xt, yt = load_cifar(tmp_path, "cifar100", "test")
    assert np.array_equal(xt, x) and yt.tolist() == [5, 99, 0, 42]


def test_missing_and_corrupt_batches_are_named(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    with pytest.raises(DataNotFoundError, match="test_batch is missing"):
        load_cifar(tmp_path, "cifar10", "test")
    (folder / "test_batch").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="corrupt"):
        load_cifar(tmp_path, "cifar10", "test")


def test_calibration_subsets_are_nested_and_seeded():
    small, big = calibration_indices(10000, 1024, 0), calibration_indices(10000, 4096, 0)
    assert set(small) <= set(big) and len(set(small)) == 1024
    assert calibration_indices(10000, 1024, 1) != small
    with pytest.raises(ValueError, match="calibration images"):
        calibration_indices(100, 101, 0)
