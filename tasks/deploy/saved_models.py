"""The dense and sparse models behind a run record: the dense model from the record's weights, the sparse one
from the state dict the grid saved beside the record (`record["sparse_model"]`, not committed), sha256-checked.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from fcpts.core.io import file_sha256
from tasks.grid.data import DataNotFoundError
from tasks.grid.paths import REPO_ROOT
from tasks.grid.records import read_record
from tasks.grid.rerun import get_task


def read_finished_record(record_path: str | Path) -> dict:
    """A run record read whole; a missing file and a record without metrics are told apart, each with its fix."""
    record_path = Path(record_path)
    if not record_path.is_file():
        raise DataNotFoundError(f"run record {record_path} does not exist; run its grid cell first")
    record = read_record(record_path)
    if record is None:
        raise DataNotFoundError(f"{record_path} is not a finished run record (no metrics); run its grid cell first")
    return record


def models_from_record(record_path: str | Path) -> tuple[nn.Module, nn.Module, tuple[int, ...], dict]:
    """(dense model, sparse model, input shape without batch, record), both models in eval mode."""
    record_path = Path(record_path)
    record = read_finished_record(record_path)
    try:  # the record's task driver builds its dense model (registered as `dense_model`)
        builder = get_task(record.get("task", "")).dense_model  # no task: unknown, as None was
    except (ValueError, ImportError):  # an unknown task, or one whose extra is not installed
        builder = None
    if builder is None:
        raise ValueError(f"{record_path}: task {record.get('task')!r} has no model builder here")
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
