"""CIFAR-10/100 readers (this workplace's `cifar10/{train,test}.npz.xz` archives, or torchvision's layout, which
`--download` creates), their normalisation and class counts; shared by the CIFAR task, its training, deploy and the
detection substitute set."""

from __future__ import annotations

import io
import lzma
import zipfile
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from tasks.grid.paths import ENV_DATA_ROOT, DataNotFoundError

# The CIFAR checkpoints (akamaster) were trained with these ImageNet statistics; our CIFAR-100 models too.
CIFAR_MEAN = (0.485, 0.456, 0.406)
CIFAR_STD = (0.229, 0.224, 0.225)
CIFAR_CLASSES = {"cifar10": 10, "cifar100": 100}
_TORCHVISION_DIRS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}


@lru_cache(maxsize=8)
def _read_npz_xz(path: str) -> dict[str, np.ndarray]:
    with lzma.open(path) as f:
        data = np.load(io.BytesIO(f.read()))
        return {k: data[k] for k in data.files}


def load_cifar(root: Path, dataset: str, split: str, download: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR images (N, 32, 32, 3) uint8 RGB and labels (N,) int64 for split 'train' or 'test'."""
    if dataset not in CIFAR_CLASSES:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {sorted(CIFAR_CLASSES)}")
    archive = root / dataset / f"{split}.npz.xz"
    tv_dir = root / _TORCHVISION_DIRS[dataset]
    if archive.is_file():
        try:
            d = _read_npz_xz(str(archive))
            return d["x"], d["y"].astype(np.int64)
        except (lzma.LZMAError, EOFError, OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
            raise ValueError(
                f"{archive} is truncated or corrupt ({type(e).__name__}: {e}); restore it (copy it again), "
                f"or remove it and use the torchvision layout with --download"
            ) from None
    if not tv_dir.is_dir() and download:
        import torchvision

        cls = torchvision.datasets.CIFAR10 if dataset == "cifar10" else torchvision.datasets.CIFAR100
        try:  # fetches and checks the archive's md5
            cls(str(root), train=split == "train", download=True)
        except OSError as e:  # URLError and friends: offline or blocked
            raise DataNotFoundError(
                f"could not download {dataset} to {root} ({e}); are you offline? "
                "Copy cifar-10-batches-py/ or cifar-100-python/ there by hand"
            ) from e
    if tv_dir.is_dir():
        return _read_cifar_python(tv_dir, dataset, split)
    raise DataNotFoundError(
        f"{dataset} {split} split not found: looked for {archive} and {tv_dir}/. "
        f"Pass --data-root DIR (or set {ENV_DATA_ROOT}) to a folder that has one of them, "
        "or add --download to fetch it with torchvision."
    )


_PY_FILES = {
    ("cifar10", "train"): [f"data_batch_{i}" for i in range(1, 6)],
    ("cifar10", "test"): ["test_batch"],
    ("cifar100", "train"): ["train"],
    ("cifar100", "test"): ["test"],
}


def _read_cifar_python(folder: Path, dataset: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The official "python version" pickles (the layout torchvision downloads)."""
    import pickle

    xs, ys = [], []
    for name in _PY_FILES[(dataset, split)]:
        path = folder / name
        if not path.is_file():
            raise DataNotFoundError(f"{path} is missing from {folder}; re-run with --download or restore the file")
        try:
            with open(path, "rb") as f:
                batch = pickle.load(f, encoding="latin1")
            data = np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
            labels = batch["labels"] if "labels" in batch else batch["fine_labels"]
        except (pickle.UnpicklingError, EOFError, KeyError, ValueError) as e:
            raise ValueError(
                f"{path} is corrupt or not a CIFAR batch ({type(e).__name__}: {e}); re-run with --download"
            ) from e
        xs.append(data)
        ys.append(np.asarray(labels, dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def normalize_cifar(x_uint8: np.ndarray | torch.Tensor) -> torch.Tensor:
    """(N, 32, 32, 3) uint8 -> (N, 3, 32, 32) float, normalised with the checkpoints' statistics."""
    x = torch.as_tensor(np.asarray(x_uint8)).permute(0, 3, 1, 2).float().div_(255)
    mean = torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD).view(1, 3, 1, 1)
    return (x - mean) / std
