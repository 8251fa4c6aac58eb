"""Deployment of sparse models: ONNX export, sparse storage, accuracy check, latency and peak memory.

    python -m tasks.deploy --record results/runs/cifar/cifar10/resnet56/fcpts-sp90-fast-seed0.json
    python -m tasks.deploy --sparse-weights results/deploy/cifar10-resnet56-fcpts-sp90-fast-seed0.pt

`--record` takes the sparse model the grid saved beside a CIFAR record (else re-runs the record's method with its
data, budget and seed) and saves it under results/deploy/; `--sparse-weights` starts from such a file or any CIFAR
ResNet state dict (--model/--dataset when it carries no metadata). Then: ONNX export (BN folded, opset 17), the
sparse storage files, ONNX against PyTorch on the test split, file sizes and the peak resident memory (VmHWM) of a
fresh inference process per file, and a JSON record beside the files. Runtimes run in a worker
(`python -m tasks.deploy worker ...`) that never imports torch, so it can live in a runtime's own venv.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# none of these imports torch: the runtime workers run in venvs without it
from tasks.deploy.runtimes import RuntimeNotInstalled, ort_session, peak_memory, worker_main
from tasks.grid.help import HelpFormatter, add_device, add_results_dir, default_device, deprecated_alias
from tasks.grid.paths import REPO_ROOT, RESULTS_DIR, DataNotFoundError, repo_relative

if TYPE_CHECKING:
    from torch import nn

DEPLOY_DIR = RESULTS_DIR / "deploy"


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
            "python -m benchmarks inference --families records --records RECORD times any task's saved sparse model"
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


def deploy_cifar(
    checkpoint: Path,
    out_dir: Path,
    data_root: str | None,
    model_name: str | None,
    dataset: str | None,
    eval_limit: int | None,
    threads: int,
) -> dict:
    """Export, store sparsely, check against PyTorch on the test split, measure memory; the record."""
    import numpy as np
    import torch

    from fcpts.core.masks import sparsity_summary
    from tasks.deploy.export import export_onnx, inference_copy, ort_predict
    from tasks.deploy.sparse_storage import write_sparse_files, zlib_size
    from tasks.grid.cifar_data import load_cifar, normalize_cifar
    from tasks.grid.paths import resolve_data_root

    model, meta = load_sparse_checkpoint(checkpoint, model_name, dataset)
    sparsity, _ = sparsity_summary(model)
    root = resolve_data_root(data_root)
    x_u8, y = load_cifar(root, meta["dataset"], "test")
    if eval_limit:
        x_u8, y = x_u8[:eval_limit], y[:eval_limit]
    x = normalize_cifar(x_u8)
    stem = out_dir / Path(checkpoint).name.removesuffix(".pt")
    export_onnx(inference_copy(model), stem.with_suffix(".onnx"), tuple(x.shape[1:]))
    paths = write_sparse_files(stem.with_suffix(".onnx"))
    with torch.inference_mode():
        ref = torch.cat([model(x[i : i + 500]) for i in range(0, len(x), 500)]).numpy()
    outputs = {k: ort_predict(ort_session(str(p), threads), x) for k, p in paths.items()}
    top1 = lambda logits: 100.0 * float((logits.argmax(1) == y).mean())  # noqa: E731
    onnx_top1 = {k: top1(v) for k, v in outputs.items()}
    memory = {k: peak_memory("onnxruntime", p, tuple(x.shape[1:]), threads) for k, p in paths.items()}
    return {
        "checkpoint": meta,
        "sparsity": sparsity,
        "n_images": len(y),
        "top1_pytorch": top1(ref),
        "top1_onnx": onnx_top1,
        "top1_diff_points": {k: v - top1(ref) for k, v in onnx_top1.items()},
        "max_abs_diff": {k: float(np.abs(v - ref).max()) for k, v in outputs.items()},
        "prediction_disagreements": {k: int((v.argmax(1) != ref.argmax(1)).sum()) for k, v in outputs.items()},
        "files": {k: repo_relative(p) for k, p in paths.items()},
        "file_bytes": {**{k: p.stat().st_size for k, p in paths.items()}, "dense_zlib": zlib_size(paths["dense"])},
        "peak_memory_onnxruntime": memory,
    }


def provenance(threads: int) -> dict:
    """Every record's provenance, plus this run's threads, load and CPU: its model, logical cores and the SIMD flags
    that decide which sparse kernels can run."""
    from tasks.grid.records import first_processor
    from tasks.grid.records import provenance as record_provenance

    fields = first_processor()
    flags = fields.get("flags", "").split()
    wanted = "avx2 fma avx512f avx512bw avx512vl avx512_vnni avx_vnni avx512_bf16 amx_tile amx_bf16 amx_int8".split()
    cpu = {
        "model": fields.get("model name", "unknown"),
        "logical_cores": os.cpu_count(),
        "flags": [f for f in wanted if f in flags],
        "amx": any(f.startswith("amx") for f in flags),
    }
    return {**record_provenance(), "cpu": cpu, "threads": threads, "loadavg_1_5_15": list(os.getloadavg())}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tasks.deploy", description=__doc__, formatter_class=HelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--sparse-weights", help="sparse CIFAR ResNet state dict (e.g. from a previous --record run)")
    deprecated_alias(src, "--checkpoint", "--sparse-weights", "sparse_weights")
    src.add_argument("--record", help="CIFAR run record: re-run its method, save the sparse model, deploy it")
    p.add_argument(
        "--model",
        "--models",
        dest="model",
        help="CIFAR model name when the checkpoint does not say (resnet20/32/44/56)",
    )
    p.add_argument("--dataset", help="cifar10 or cifar100 when the checkpoint does not say")
    p.add_argument("--data-root", help="folder with CIFAR (default: $FCPTS_DATA_ROOT, then ../shared/data)")
    add_results_dir(p, str(DEPLOY_DIR), "where the exported files and the deployment record go", "--out-dir")
    p.add_argument("--eval-limit", type=int, help="first N test images only (default: all)")
    p.add_argument("--threads", type=int, default=1)
    add_device(p, "where a --record's method is re-run (export and ONNX checks always run on the CPU)")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        return worker_main(argv[1:])
    args = parse_args(argv)
    import torch

    from fcpts.core.io import write_json_atomic
    from fcpts.core.options import resolve_device
    from tasks.grid.records import git_commit

    torch.set_num_threads(args.threads)
    git_commit()  # pin the commit of the code that runs
    out_dir, args.device = Path(args.results_dir), default_device(args.device)
    try:
        resolve_device(args.device)
        ckpt = (
            sparse_model_from_record(Path(args.record), out_dir, args.data_root, not args.no_progress, args.device)
            if args.record
            else Path(args.sparse_weights)
        )
        rec = deploy_cifar(ckpt, out_dir, args.data_root, args.model, args.dataset, args.eval_limit, args.threads)
    except (DataNotFoundError, ValueError, RuntimeNotInstalled) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rec["provenance"] = provenance(args.threads)
    path = out_dir / f"{ckpt.name.removesuffix('.pt')}.json"
    write_json_atomic(path, rec)
    print(f"sparsity {rec['sparsity']:.6f}; top-1 on {rec['n_images']} test images: PyTorch {rec['top1_pytorch']:.2f}")
    for k in rec["top1_onnx"]:
        print(
            f"  ONNX ({k:18s}) top-1 {rec['top1_onnx'][k]:.2f} (diff {rec['top1_diff_points'][k]:+.2f}), "
            f"max |diff| {rec['max_abs_diff'][k]:.2e}, {rec['prediction_disagreements'][k]} disagreements, file "
            f"{rec['file_bytes'][k] / 1e6:.3f} MB, ORT VmHWM {rec['peak_memory_onnxruntime'][k]['vmhwm_mib']:.1f} MiB"
        )
    print(f"  dense file under zlib: {rec['file_bytes']['dense_zlib'] / 1e6:.3f} MB")
    print(f"record: {path}")
    return 0
