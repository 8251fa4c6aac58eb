"""Deployment of sparse models: ONNX export, sparse storage, accuracy check, latency and peak memory.

    python -m tasks.deploy --record results/runs/cifar/cifar10/resnet56/fcpts-sp90-fast-seed0.json
    python -m tasks.deploy --checkpoint results/deploy/cifar10-resnet56-fcpts-sp90-fast-seed0.pt

Run records hold metrics, not weights, so `--record` re-runs the record's method with the record's data,
budget and seed, saves the sparse state dict under results/deploy/ and deploys it; `--checkpoint` starts
from such a file (or any CIFAR ResNet state dict: pass --model/--dataset when it carries no metadata).
Deploying means: export to ONNX (BN folded, opset 17), write the sparse storage files, compare ONNX and
PyTorch outputs and top-1 on the test split, measure file sizes and the peak resident memory (VmHWM) of
a fresh inference process per file, and write a JSON record beside the files.

Runtimes live behind one worker (`python -m tasks.deploy worker ...`) that imports only numpy, the
runtime and, for bitmask files, onnx, so it runs in a runtime's own virtual environment (DeepSparse pins
onnx 1.14 and numpy 1.26) and its VmHWM is the inference process's own. Torch is never imported here at
module level for the same reason.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tasks.grid.paths import REPO_ROOT, RESULTS_DIR  # no torch there: workers run in venvs without it

DEPLOY_DIR = RESULTS_DIR / "deploy"
RESULT_MARK = "FCPTS_WORKER_RESULT "
# sparse_storage's file kinds, by name, so a worker for a plain .onnx never imports onnx (memory, venvs)
BITMASK_SUFFIX, SPARSE_ONNX_SUFFIX = ".bitmask.zip", ".sparse.onnx"

# runtime -> (import name, environment variable naming its python, default venv folder, install hint)
RUNTIMES = {
    "onnxruntime": ("onnxruntime", "FCPTS_ONNXRUNTIME_PYTHON", None,
                    "pip install onnxruntime (a core dependency of this suite)"),
    "deepsparse": ("deepsparse", "FCPTS_DEEPSPARSE_PYTHON", ".venv-deepsparse",
                   "python3.11 -m venv .venv-deepsparse && .venv-deepsparse/bin/pip install deepsparse==1.8.0 "
                   "(Python <= 3.11; pins onnx 1.14.1 and numpy 1.26, hence its own environment; Neural Magic "
                   "Community License: evaluation use only)"),
    "openvino": ("openvino", "FCPTS_OPENVINO_PYTHON", ".venv-openvino",
                 "python3 -m venv .venv-openvino && .venv-openvino/bin/pip install openvino"),
}


class RuntimeNotInstalled(RuntimeError):
    """A runtime is missing; the message says where we looked and how to install it."""


# ----------------------------------------------------------------------------- locating runtimes


def runtime_python(runtime: str) -> str:
    """The python that has `runtime`: $FCPTS_<RUNTIME>_PYTHON, else <repo>/<default venv>, else this one."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {sorted(RUNTIMES)}")
    _, env, venv, _ = RUNTIMES[runtime]
    if os.environ.get(env):
        return os.environ[env]
    if venv and (REPO_ROOT / venv / "bin" / "python").is_file():
        return str(REPO_ROOT / venv / "bin" / "python")
    return sys.executable


def runtime_version(runtime: str, python: str | None = None) -> str:
    """The runtime's version in its python, or RuntimeNotInstalled saying how to install it."""
    module, env, _, hint = RUNTIMES[runtime] if runtime in RUNTIMES else (None, None, None, None)
    if module is None:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {sorted(RUNTIMES)}")
    python = python or runtime_python(runtime)
    code = f"import {module} as m; print(getattr(m, '__version__', None) or m.get_version())"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                             env=_worker_env(1))
    except OSError as e:
        raise RuntimeNotInstalled(f"{runtime}: cannot start {python} ({e}). Install: {hint}; "
                                  f"or set {env}=/path/to/python") from e
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeNotInstalled(f"{runtime} is not installed for {python} ({last}). Install: {hint}; "
                                  f"then set {env}=/path/to/that/python (or use the default venv folder)")
    return out.stdout.strip().splitlines()[-1]


def _worker_env(threads: int) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), NM_DISABLE_ANALYTICS="1", PYTHONPATH=str(REPO_ROOT))
    env.pop("PYTHONHOME", None)
    return env


def run_worker(runtime: str, args: list[str], threads: int = 1, timeout: float = 3600) -> dict:
    """Run `python -m tasks.deploy worker --runtime R ...` in the runtime's python; its JSON result."""
    python = runtime_python(runtime)
    runtime_version(runtime, python)  # clear error when missing
    cmd = [python, "-m", "tasks.deploy", "worker", "--runtime", runtime, "--threads", str(threads), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, env=_worker_env(threads),
                         timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(RESULT_MARK)]
    if out.returncode != 0 or not lines:
        tail = "\n".join((out.stderr or out.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"{runtime} worker failed (exit {out.returncode}): {' '.join(cmd)}\n{tail}")
    return json.loads(lines[-1][len(RESULT_MARK):])


# ----------------------------------------------------------------------------- the worker


def vm_hwm_kib() -> int:
    """Peak resident set size of this process (VmHWM, KiB): the honest peak memory on Linux."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def _plain_onnx_path(path: str) -> str:
    """A file a runtime can read: bitmask zips and sparse-initializer files expanded to a temp ONNX."""
    if not path.endswith((BITMASK_SUFFIX, SPARSE_ONNX_SUFFIX)):
        return path
    import tempfile

    import onnx

    from tasks.deploy.sparse_storage import load_any

    fd, tmp = tempfile.mkstemp(suffix=".onnx")
    os.close(fd)
    onnx.save(load_any(path), tmp)
    return tmp


def _load_onnxruntime(path: str, batch: int, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    if path.endswith(BITMASK_SUFFIX):  # expanded in memory; sparse-initializer files load natively
        from tasks.deploy.sparse_storage import load_any

        model = load_any(path).SerializeToString()
    else:
        model = path
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return (lambda x: sess.run(None, {name: x})[0]), {}


def _load_deepsparse(path: str, batch: int, threads: int):
    import deepsparse

    engine = deepsparse.compile_model(_plain_onnx_path(path), batch_size=batch, num_cores=threads)
    return (lambda x: engine.run([x])[0]), {"num_cores": threads}


def _load_openvino(path: str, batch: int, threads: int):
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
              "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
    applied = dict(config)
    try:  # acts only with AMX + int8 FullyConnected; set so the run shows it was tried
        core.set_property("CPU", {"CPU_SPARSE_WEIGHTS_DECOMPRESSION_RATE": 0.5})
        applied["CPU_SPARSE_WEIGHTS_DECOMPRESSION_RATE"] = 0.5
    except Exception as e:  # noqa: BLE001 - older/newer builds reject unknown properties
        applied["CPU_SPARSE_WEIGHTS_DECOMPRESSION_RATE"] = f"rejected: {e}"[:200]
    model = core.read_model(_plain_onnx_path(path))
    model.reshape([batch, *model.input(0).get_partial_shape()[1:]])
    compiled = core.compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    return (lambda x: request.infer({0: x})[compiled.output(0)]), applied


LOADERS = {"onnxruntime": _load_onnxruntime, "deepsparse": _load_deepsparse, "openvino": _load_openvino}


def time_interleaved(runners: dict, x, warmup: int, runs: int, min_sample_s: float = 0.05) -> dict[str, list[float]]:
    """Per-call times (s) of every model, one sample of every model per round, order rotated each round,
    so slow drift of a shared CPU hits all models alike. A sample repeats the call k times (k from the
    first model's warm-up, the same k for all) so that it lasts >= min_sample_s: scheduler slices of a
    busy machine then blur into the mean instead of deciding single millisecond calls."""
    names = list(runners)
    for _ in range(warmup):
        for n in names:
            t = time.perf_counter()
            runners[n](x)
            if n == names[0]:
                first = time.perf_counter() - t
    k = max(1, round(min_sample_s / max(first, 1e-6))) if warmup else 1
    times = {n: [] for n in names}
    for r in range(runs):
        for n in names[r % len(names):] + names[:r % len(names)]:
            t = time.perf_counter()
            for _ in range(k):
                runners[n](x)
            times[n].append((time.perf_counter() - t) / k)
    return times


def worker_main(argv: list[str]) -> int:
    """Load models in one runtime; `time`: interleaved latencies; `memory`: VmHWM before/after one model."""
    p = argparse.ArgumentParser(prog="python -m tasks.deploy worker")
    p.add_argument("--runtime", required=True, choices=sorted(LOADERS))
    p.add_argument("--mode", choices=["time", "memory"], default="time")
    p.add_argument("--models", nargs="+", required=True)
    p.add_argument("--shape", nargs="+", type=int, required=True, help="input shape without batch")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--runs", type=int, default=20)
    a = p.parse_args(argv)
    import numpy as np

    module = __import__(RUNTIMES[a.runtime][0])
    hwm_start = vm_hwm_kib()
    x = np.random.default_rng(0).standard_normal((a.batch, *a.shape), dtype=np.float32)
    runners, applied, load_s = {}, {}, {}
    for path in a.models:
        t = time.perf_counter()
        runners[path], applied = LOADERS[a.runtime](path, a.batch, a.threads)
        load_s[path] = time.perf_counter() - t
    times = time_interleaved(runners, x, a.warmup, a.runs)
    result = {"runtime": a.runtime, "version": getattr(module, "__version__", None) or module.get_version(),
              "python": sys.executable, "batch": a.batch, "threads": a.threads, "options": applied,
              "load_s": load_s, "vmhwm_kib_after_import": hwm_start, "vmhwm_kib": vm_hwm_kib()}
    if a.mode == "time":
        result["times_s"] = times
        result["median_s"] = {n: statistics.median(v) for n, v in times.items()}
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


def peak_memory(runtime: str, path: str | Path, shape: tuple[int, ...], threads: int = 1) -> dict:
    """VmHWM of a fresh process that loads one model file and runs 5 batch-1 inferences."""
    r = run_worker(runtime, ["--mode", "memory", "--models", str(path), "--shape", *map(str, shape),
                             "--batch", "1", "--warmup", "1", "--runs", "5"], threads)
    return {"vmhwm_mib": r["vmhwm_kib"] / 1024, "vmhwm_after_import_mib": r["vmhwm_kib_after_import"] / 1024,
            "model_mib": (r["vmhwm_kib"] - r["vmhwm_kib_after_import"]) / 1024, "runtime_version": r["version"]}


# ----------------------------------------------------------------------------- sparse CIFAR models


def checkpoint_name(record: dict) -> str:
    return (f"{record['dataset']}-{record['model']}-{record['method']}-sp{round(record['target_sparsity'] * 100):02d}"
            f"-{record['profile']['name']}-seed{record['seed']}")


def sparse_model_from_record(record_path: Path, out_dir: Path, data_root: str | None, progress: bool) -> Path:
    """A CIFAR record's sparse model as a deploy checkpoint with its provenance: the state dict the grid
    saved beside the record when it is here, else a re-run of the record's method (same weights,
    calibration images, budget and seed). Returns the checkpoint path."""
    import torch

    import tasks.cifar.grid  # noqa: F401 - registers the CIFAR task for re-running its records
    from tasks.deploy.saved_models import models_from_record
    from tasks.grid.data import DataNotFoundError
    from tasks.grid.records import command_line, git_commit
    from tasks.grid.rerun import rerun_record

    record = json.loads(Path(record_path).read_text())
    if record.get("task") != "cifar":
        raise ValueError(f"{record_path}: only CIFAR records can be deployed here (task {record.get('task')!r}); "
                         "python -m benchmarks.inference --records RECORD times any task's saved sparse model")
    out = out_dir / f"{checkpoint_name(record)}.pt"
    provenance = {"model": record["model"], "dataset": record["dataset"], "method": record["method"],
                  "target_sparsity": record["target_sparsity"], "record_top1": record["metrics"]["top1"],
                  "source_record": str(record_path), "git_commit": git_commit(), "command": command_line()}
    if record.get("sparse_model"):
        try:
            _, model, _, _ = models_from_record(record_path)
        except DataNotFoundError as e:
            print(f"{e}\nre-running the record's method instead")
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"state_dict": model.state_dict(), **provenance,
                        "source": f"saved sparse model {record['sparse_model']['path']}"}, out)
            print(f"saved sparse model of {record_path} (sha256 checked) -> {out}")
            return out
    scratch = RESULTS_DIR / "checkpoints" / "deploy" / checkpoint_name(record)
    rerun, rerun_path = rerun_record(record, runs_dir=scratch, data_root=data_root, device="cpu", progress=progress)
    if rerun["calibration"]["indices_sha256"] != record["calibration"]["indices_sha256"]:
        raise ValueError(f"{record_path}: calibration images differ from the record's; cannot reproduce it")
    _, model, _, _ = models_from_record(rerun_path)
    print(f"re-ran {record['method']} at {record['target_sparsity']:.0%}: top-1 {rerun['metrics']['top1']:.2f} "
          f"(record {record['metrics']['top1']:.2f}), sparsity {rerun['achieved_sparsity']:.6f}, "
          f"{rerun['wall_s']:.0f}s")
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": model.state_dict(), **provenance, "source": "re-run of the record's method",
                "achieved_sparsity": rerun["achieved_sparsity"], "top1": rerun["metrics"]["top1"],
                "rerun_wall_s": rerun["wall_s"], "threads": torch.get_num_threads()}, out)
    return out


def load_sparse_checkpoint(path: Path, model_name: str | None, dataset: str | None):
    """(model, metadata) from a checkpoint written by `sparse_model_from_record` or a plain state dict."""
    import torch

    from tasks.cifar.data import CIFAR_CLASSES
    from tasks.cifar.models import cifar_resnet, load_checkpoint

    raw = torch.load(path, map_location="cpu", weights_only=False) if Path(path).is_file() else {}
    meta = raw if isinstance(raw, dict) and "state_dict" in raw else {}
    model_name = model_name or meta.get("model")
    dataset = dataset or meta.get("dataset") or "cifar10"
    if not model_name:
        raise ValueError(f"{path} does not say which model it holds; pass --model (e.g. resnet56)")
    model = cifar_resnet(model_name, CIFAR_CLASSES[dataset])
    info = load_checkpoint(model, path)  # clear errors for missing / corrupt / mismatched files
    return model.eval(), {**info, "model": model_name, "dataset": dataset}


# ----------------------------------------------------------------------------- deploying one model


def file_sizes(paths: dict[str, Path]) -> dict[str, int]:
    from tasks.deploy.sparse_storage import zlib_size

    sizes = {k: p.stat().st_size for k, p in paths.items()}
    sizes["dense_zlib"] = zlib_size(paths["dense"])
    return sizes


def deploy_cifar(checkpoint: Path, out_dir: Path, data_root: str | None, model_name: str | None,
                 dataset: str | None, eval_limit: int | None, threads: int) -> dict:
    """Export, store sparsely, check against PyTorch on the test split, measure memory; the record."""
    import numpy as np
    import torch

    from fcpts.core.masks import sparsity_summary
    from tasks.cifar.data import load_cifar, normalize_cifar
    from tasks.deploy.export import export_onnx, inference_copy, ort_predict, ort_session
    from tasks.deploy.sparse_storage import load_any, write_sparse_files
    from tasks.grid.data import resolve_data_root

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
        ref = torch.cat([model(x[i:i + 500]) for i in range(0, len(x), 500)]).numpy()
    outputs = {k: ort_predict(ort_session(load_any(p).SerializeToString() if k == "bitmask" else str(p), threads), x)
               for k, p in paths.items()}
    top1 = lambda logits: 100.0 * float((logits.argmax(1) == y).mean())  # noqa: E731
    onnx_top1 = {k: top1(v) for k, v in outputs.items()}
    memory = {k: peak_memory("onnxruntime", p, tuple(x.shape[1:]), threads) for k, p in paths.items()}
    return {
        "checkpoint": meta, "sparsity": sparsity, "n_images": len(y),
        "top1_pytorch": top1(ref), "top1_onnx": onnx_top1,
        "top1_diff_points": {k: v - top1(ref) for k, v in onnx_top1.items()},
        "max_abs_diff": {k: float(np.abs(v - ref).max()) for k, v in outputs.items()},
        "prediction_disagreements": {k: int((v.argmax(1) != ref.argmax(1)).sum()) for k, v in outputs.items()},
        "files": {k: str(p.relative_to(REPO_ROOT)) if p.is_relative_to(REPO_ROOT) else str(p) for k, p in paths.items()},
        "file_bytes": file_sizes(paths), "peak_memory_onnxruntime": memory,
    }


def provenance(threads: int) -> dict:
    """Command, commit, device (CPU model, flags), threads, load and date of this run."""
    from datetime import datetime, timezone

    from tasks.grid.records import command_line, environment, git_commit

    return {"command": command_line(), "git_commit": git_commit(), "cpu": cpu_description(),
            "threads": threads, "loadavg_1_5_15": list(os.getloadavg()), "environment": environment(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def cpu_description() -> dict:
    """CPU model, logical cores and the SIMD flags that decide which sparse kernels can run."""
    model, flags = "unknown", []
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        model = next(ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name"))
        flags = next(ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags"))
    except (OSError, StopIteration):
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16",
              "amx_tile", "amx_bf16", "amx_int8")
    return {"model": model, "logical_cores": os.cpu_count(), "flags": [f for f in wanted if f in flags],
            "amx": any(f.startswith("amx") for f in flags)}


def print_summary(rec: dict) -> None:
    print(f"sparsity {rec['sparsity']:.6f}; top-1 on {rec['n_images']} test images: PyTorch {rec['top1_pytorch']:.2f}")
    for k in rec["top1_onnx"]:
        m = rec["peak_memory_onnxruntime"][k]
        print(f"  ONNX ({k:18s}) top-1 {rec['top1_onnx'][k]:.2f} (diff {rec['top1_diff_points'][k]:+.2f}), "
              f"max |diff| {rec['max_abs_diff'][k]:.2e}, {rec['prediction_disagreements'][k]} disagreements, "
              f"file {rec['file_bytes'][k] / 1e6:.3f} MB, ORT VmHWM {m['vmhwm_mib']:.1f} MiB")
    print(f"  dense file under zlib: {rec['file_bytes']['dense_zlib'] / 1e6:.3f} MB")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tasks.deploy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="sparse CIFAR ResNet state dict (e.g. from a previous --record run)")
    src.add_argument("--record", help="CIFAR run record: re-run its method, save the sparse model, deploy it")
    p.add_argument("--model", help="CIFAR model name when the checkpoint does not say (resnet20/32/44/56)")
    p.add_argument("--dataset", help="cifar10 or cifar100 when the checkpoint does not say")
    p.add_argument("--data-root", help="folder with CIFAR (default: $FCPTS_DATA_ROOT, then ../shared/data)")
    p.add_argument("--out-dir", default=str(DEPLOY_DIR))
    p.add_argument("--eval-limit", type=int, help="first N test images only (default: all)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        return worker_main(argv[1:])
    args = parse_args(argv)
    import torch

    from fcpts.core.io import write_json_atomic
    from tasks.grid.data import DataNotFoundError
    from tasks.grid.records import git_commit

    torch.set_num_threads(args.threads)
    git_commit()  # pin the commit of the code that runs
    out_dir = Path(args.out_dir)
    try:
        ckpt = (sparse_model_from_record(Path(args.record), out_dir, args.data_root, not args.no_progress)
                if args.record else Path(args.checkpoint))
        rec = deploy_cifar(ckpt, out_dir, args.data_root, args.model, args.dataset, args.eval_limit, args.threads)
    except (DataNotFoundError, ValueError, RuntimeNotInstalled) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rec["provenance"] = provenance(args.threads)
    path = out_dir / f"{ckpt.name.removesuffix('.pt')}.json"
    write_json_atomic(path, rec)
    print_summary(rec)
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
