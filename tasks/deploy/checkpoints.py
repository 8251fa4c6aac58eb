"""The sparse model behind a run record (the state dict the grid saved beside it, not committed, sha256-checked) and
the CIFAR checkpoint to deploy, with its provenance (that state dict, or a re-run of the record's method). Torch is
imported inside the functions: the worker process never loads it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tasks.grid.data import DataNotFoundError
from tasks.grid.paths import REPO_ROOT, RESULTS_DIR

if TYPE_CHECKING:
    from torch import nn


def read_finished_record(record_path: str | Path) -> dict:
    """A run record read whole; a missing file and a record without metrics are told apart, each with its fix."""
    from tasks.grid.records import read_record

    record_path = Path(record_path)
    if not record_path.is_file():
        raise DataNotFoundError(f"run record {record_path} does not exist; run its grid cell first")
    record = read_record(record_path)
    if record is None:
        raise DataNotFoundError(f"{record_path} is not a finished run record (no metrics); run its grid cell first")
    return record


def models_from_record(record_path: str | Path) -> tuple[nn.Module, nn.Module, tuple[int, ...], dict]:
    """(dense model, sparse model, input shape without batch, record), both models in eval mode."""
    import torch

    from fcpts.core.io import file_sha256
    from tasks.grid.rerun import get_task

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
    path = REPO_ROOT / saved["path"]  # an absolute path stays itself
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


def sparse_model_from_record(
    record_path: Path, out_dir: Path, data_root: str | None, progress: bool, device: str = "cpu"
) -> Path:
    """A CIFAR record's sparse model as a deploy checkpoint with its provenance (the saved state dict when it is
    here, else a re-run of the record's method on `device`); returns the checkpoint path."""
    import torch

    from fcpts.core.io import save_torch_atomic
    from tasks.grid.records import command_line, git_commit, sparsity_tag
    from tasks.grid.rerun import rerun_record
    from tasks.grid.runner import Where

    record = read_finished_record(record_path)
    if record.get("task") != "cifar":
        raise ValueError(
            f"{record_path}: only CIFAR records can be deployed here (task {record.get('task')!r}); "
            "python -m benchmarks.inference.inference --records RECORD times any task's saved sparse model"
        )
    name = (
        f"{record['dataset']}-{record['model']}-{record['method']}-{sparsity_tag(record['target_sparsity'])}"
        f"-{record['profile']['name']}-seed{record['seed']}"
    )
    out = out_dir / f"{name}.pt"
    provenance = {
        **{key: record[key] for key in ("model", "dataset", "method", "target_sparsity")},
        "record_top1": record["metrics"]["top1"],
        "source_record": str(record_path),
        "git_commit": git_commit(),
        "command": command_line(),
    }
    if record.get("sparse_model"):
        try:
            _, model, _, _ = models_from_record(record_path)
        except DataNotFoundError as e:
            print(f"{e}\nre-running the record's method instead")
        else:
            source = f"saved sparse model {record['sparse_model']['path']}"
            save_torch_atomic({"state_dict": model.state_dict(), **provenance, "source": source}, out)
            print(f"saved sparse model of {record_path} (sha256 checked) -> {out}")
            return out
    scratch = RESULTS_DIR / "checkpoints" / "deploy" / name
    where = Where(runs_dir=scratch, data_root=data_root, progress=progress, device=device)
    rerun, rerun_path = rerun_record(record, where)
    if rerun["calibration"]["indices_sha256"] != record["calibration"]["indices_sha256"]:
        raise ValueError(f"{record_path}: calibration images differ from the record's; cannot reproduce it")
    _, model, _, _ = models_from_record(rerun_path)
    print(
        f"re-ran {record['method']} at {record['target_sparsity']:.0%}: top-1 {rerun['metrics']['top1']:.2f} "
        f"(record {record['metrics']['top1']:.2f}), sparsity {rerun['achieved_sparsity']:.6f}, "
        f"{rerun['wall_s']:.0f}s"
    )
    save_torch_atomic(
        {
            "state_dict": model.state_dict(),
            **provenance,
            "source": "re-run of the record's method",
            "achieved_sparsity": rerun["achieved_sparsity"],
            "top1": rerun["metrics"]["top1"],
            "rerun_wall_s": rerun["wall_s"],
            "threads": torch.get_num_threads(),
        },
        out,
    )
    return out


def load_sparse_checkpoint(path: Path, model_name: str | None, dataset: str | None):
    """(model, metadata) from a checkpoint written by `sparse_model_from_record` or a plain state dict."""
    from tasks.grid.cifar_data import CIFAR_CLASSES
    from tasks.grid.cifar_models import cifar_resnet
    from tasks.grid.weights import load_checkpoint, read_state_dict

    meta = read_state_dict(path)[1] if Path(path).is_file() else {}  # a file that is no checkpoint: named
    model_name = model_name or meta.get("model")
    dataset = dataset or meta.get("dataset") or "cifar10"
    if not model_name:
        raise ValueError(f"{path} does not say which model it holds; pass --model (e.g. resnet56)")
    model = cifar_resnet(model_name, CIFAR_CLASSES[dataset])
    info = load_checkpoint(model, path)  # clear errors for missing / corrupt / mismatched files
    return model.eval(), {**info, "model": model_name, "dataset": dataset}
