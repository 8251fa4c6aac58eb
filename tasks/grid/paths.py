"""Where the suite writes ($FCPTS_RESULTS_DIR, else the repository's results/; each command's flags narrow it) and
where it reads data: the data-root rule every task shares (`--data-root`, then $FCPTS_DATA_ROOT, then
../shared/data), the error for missing data, and seeded calibration subsets."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = Path(os.environ.get("FCPTS_RESULTS_DIR", REPO_ROOT / "results"))
RUNS_DIR = RESULTS_DIR / "runs"


def repo_relative(path: str | Path) -> str:
    """Repository-relative when inside the repository (records stay valid in any clone)."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


DEFAULT_DATA_ROOT = REPO_ROOT.parent / "shared" / "data"
ENV_DATA_ROOT = "FCPTS_DATA_ROOT"


class DataNotFoundError(FileNotFoundError):
    """A dataset or weights file is missing; the message says where we looked and what to pass."""


CIFAR_DATA = "CIFAR (cifar-10-batches-py/ or cifar10/*.npz.xz); add --download to fetch CIFAR there with torchvision"


def resolve_data_root(
    data_root: str | os.PathLike | None = None,
    must_exist: bool = True,
    holding: str = "the command's data (see its --help)",
) -> Path:
    """Apply the data-root rule; a missing folder is an error saying what it should hold (and how to get it)."""
    if data_root is not None:
        root, source = Path(data_root), "--data-root"
    elif os.environ.get(ENV_DATA_ROOT):
        root, source = Path(os.environ[ENV_DATA_ROOT]), f"${ENV_DATA_ROOT}"
    else:
        root, source = DEFAULT_DATA_ROOT, "the default"
    if must_exist and not root.is_dir():
        raise DataNotFoundError(
            f"data root {root} (from {source}) does not exist. Pass --data-root DIR or set "
            f"{ENV_DATA_ROOT}=DIR to a folder holding {holding}."
        )
    return root


def calibration_indices(n_available: int, n: int, seed: int) -> list[int]:
    """A seeded random subset of the training split (sorted, so records read naturally)."""
    if not 0 < n <= n_available:
        raise ValueError(f"need 1..{n_available} calibration images, asked for {n}")
    import torch  # here: the data roots are read by commands that need no torch (tasks.voc.make_set --help)

    g = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(n_available, generator=g)[:n].tolist())


def calibration_subset(
    n_available: int, n: int, seed: int, split: str, augment: str, **extra
) -> tuple[list[int], dict]:
    """A seeded calibration subset (capped at the split's size) and what a record says about it."""
    idx = calibration_indices(n_available, min(n, n_available), seed)
    digest = hashlib.sha256(",".join(map(str, idx)).encode()).hexdigest()[:16]
    info = {
        "split": split,
        "n_images": len(idx),
        "n_requested": n,
        "seed": seed,
        "indices_sha256": digest,
        "indices": idx,
        **extra,
        "augment": augment,
    }
    return idx, info
