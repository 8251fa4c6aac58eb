"""The dense and sparse models behind a run record, rebuilt from what the runner saved.

Every grid cell saves its sparse state dict (`record["sparse_model"]`, not committed: large and
re-creatable) beside the record. Deployment and benchmarks start from there instead of re-running the
method: the dense model comes from the record's weights, the sparse one is the same architecture with the
saved state dict, checked against the sha256 the record holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from fcpts.core.io import file_sha256
from tasks.grid.data import DataNotFoundError
from tasks.grid.paths import REPO_ROOT


def _dense_cifar(record: dict) -> tuple[nn.Module, tuple[int, ...]]:
    """The record's dense weights: its path when it exists here, else this machine's default location
    for the same model (a clone elsewhere), accepted only with the record's sha256."""
    from tasks.grid.cifar_data import CIFAR_CLASSES
    from tasks.grid.cifar_models import cifar_resnet
    from tasks.grid.data import resolve_data_root
    from tasks.grid.weights import default_cifar_weights, load_checkpoint

    model = cifar_resnet(record["model"], num_classes=CIFAR_CLASSES[record["dataset"]])
    path = Path(record["weights"]["path"])
    if not path.is_file():
        path = default_cifar_weights(resolve_data_root(None), record["dataset"], record["model"])
    info = load_checkpoint(model, path)
    if info["sha256"] != record["weights"]["sha256"]:
        raise ValueError(
            f"dense weights {path} are not the ones the record started from (sha256 "
            f"{info['sha256'][:12]} vs {record['weights']['sha256'][:12]})"
        )
    return model, (3, 32, 32)


def _dense_library(record: dict) -> tuple[nn.Module, tuple[int, ...]]:
    from tasks.imagenet.models import pretrained

    w = record.get("weights", {})
    path = w.get("path") if w.get("source") == "file" else None  # library/package weights: fetched by name
    model, _ = pretrained(record["model"], path)
    return model, (3, record["preprocessing"]["input_size"], record["preprocessing"]["input_size"])


DENSE_BUILDERS = {"cifar": _dense_cifar, "imagenet": _dense_library}


def models_from_record(record_path: str | Path) -> tuple[nn.Module, nn.Module, tuple[int, ...], dict]:
    """(dense model, sparse model, input shape without batch, record), both models in eval mode."""
    record_path = Path(record_path)
    if not record_path.is_file():
        raise DataNotFoundError(f"run record {record_path} does not exist; run its grid cell first")
    record = json.loads(record_path.read_text())
    builder = DENSE_BUILDERS.get(record.get("task"))
    if builder is None:
        raise ValueError(
            f"{record_path}: task {record.get('task')!r} has no model builder here "
            f"(supported: {sorted(DENSE_BUILDERS)})"
        )
    # relabelled records: today's spelling; --force because the finished cell would otherwise be skipped
    command = record.get("equivalent_command", record["command"]) + " --force  # re-runs the cell, rewrites its record"
    saved = record.get("sparse_model")
    if not saved:
        raise ValueError(f"{record_path} was written before sparse models were saved; re-run its command:\n  {command}")
    path = Path(saved["path"]) if Path(saved["path"]).is_absolute() else REPO_ROOT / saved["path"]
    if not path.is_file():
        raise DataNotFoundError(
            f"sparse model {path} of {record_path} is missing (models are not committed); "
            f"re-create it with:\n  {command}"
        )
    if file_sha256(path) != saved["sha256"]:
        raise ValueError(
            f"sparse model {path} does not match the sha256 in {record_path}; it was overwritten "
            f"by another run. Re-create it with:\n  {command}"
        )
    dense, shape = builder(record)
    sparse, _ = builder(record)
    sparse.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return dense.eval(), sparse.eval(), shape, record
