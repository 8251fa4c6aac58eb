"""Inference runtimes, each possibly in its own venv (DeepSparse pins onnx 1.14 and numpy 1.26): finding a runtime's
python and starting the inference worker in it, a fresh process per measurement (a missing runtime says how to
install it), and the worker itself (`python -m tasks.deploy worker ...`). This module imports only numpy, the
runtime and, for bitmask files, onnx (never torch), so the worker runs in a runtime's own venv and its VmHWM is the
inference's own."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tasks.grid.paths import REPO_ROOT  # no torch there: workers run in venvs without it

RESULT_MARK = "FCPTS_WORKER_RESULT "
# sparse_storage's file kinds, by name, so a worker for a plain .onnx never imports onnx (memory, venvs)
BITMASK_SUFFIX, SPARSE_ONNX_SUFFIX = ".bitmask.zip", ".sparse.onnx"

# runtime (its import name) -> (default venv folder, install hint); $FCPTS_<RUNTIME>_PYTHON names its python
RUNTIMES = {
    "onnxruntime": (None, "pip install onnxruntime (a core dependency of this suite)"),
    "deepsparse": (
        ".venv-deepsparse",
        "python3.11 -m venv .venv-deepsparse && .venv-deepsparse/bin/pip install deepsparse==1.8.0 "
        "(Python <= 3.11; pins onnx 1.14.1 and numpy 1.26, hence its own environment; Neural Magic "
        "Community License: evaluation use only)",
    ),
    "openvino": (".venv-openvino", "python3 -m venv .venv-openvino && .venv-openvino/bin/pip install openvino"),
}


class RuntimeNotInstalled(RuntimeError):
    """A runtime is missing; the message says where we looked and how to install it."""


def _spec(runtime: str) -> tuple[str, str | None, str]:
    """(environment variable naming its python, default venv folder, install hint)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {sorted(RUNTIMES)}")
    return (f"FCPTS_{runtime.upper()}_PYTHON", *RUNTIMES[runtime])


def runtime_python(runtime: str) -> str:
    """The python that has `runtime`: $FCPTS_<RUNTIME>_PYTHON, else <repo>/<default venv>, else this one."""
    env, venv, _ = _spec(runtime)
    if os.environ.get(env):
        return os.environ[env]
    if venv and (REPO_ROOT / venv / "bin" / "python").is_file():
        return str(REPO_ROOT / venv / "bin" / "python")
    return sys.executable


def runtime_version(runtime: str, python: str | None = None) -> str:
    """The runtime's version in its python, or RuntimeNotInstalled saying how to install it."""
    env, _, hint = _spec(runtime)
    python = python or runtime_python(runtime)
    code = f"import {runtime} as m; print(getattr(m, '__version__', None) or m.get_version())"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, env=_worker_env(1))
    except OSError as e:
        raise RuntimeNotInstalled(
            f"{runtime}: cannot start {python} ({e}). Install: {hint}; or set {env}=/path/to/python"
        ) from e
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeNotInstalled(
            f"{runtime} is not installed for {python} ({last}). Install: {hint}; "
            f"then set {env}=/path/to/that/python (or use the default venv folder)"
        )
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
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, env=_worker_env(threads), timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(RESULT_MARK)]
    if out.returncode != 0 or not lines:
        tail = "\n".join((out.stderr or out.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"{runtime} worker failed (exit {out.returncode}): {' '.join(cmd)}\n{tail}")
    return json.loads(lines[-1][len(RESULT_MARK) :])


def peak_memory(runtime: str, path: str | Path, shape: tuple[int, ...], threads: int = 1) -> dict:
    """VmHWM of a fresh process that loads one model file and runs 5 batch-1 inferences."""
    runs = "--batch 1 --warmup 1 --runs 5".split()
    r = run_worker(runtime, ["--mode", "memory", "--models", str(path), "--shape", *map(str, shape), *runs], threads)
    return {
        "vmhwm_mib": r["vmhwm_kib"] / 1024,
        "vmhwm_after_import_mib": r["vmhwm_kib_after_import"] / 1024,
        "model_mib": (r["vmhwm_kib"] - r["vmhwm_kib_after_import"]) / 1024,
        "runtime_version": r["version"],
    }


def vm_hwm_kib() -> int:
    """Peak resident set size of this process (VmHWM, KiB): the honest peak memory on Linux."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def _plain_onnx_path(path: str) -> str:
    """A file a runtime can read: bitmask zips and sparse-initializer files expanded to a temp ONNX."""
    if not path.endswith((BITMASK_SUFFIX, SPARSE_ONNX_SUFFIX)):
        return path
    import tempfile

    from tasks.deploy.sparse_storage import load_any

    fd, tmp = tempfile.mkstemp(suffix=".onnx")
    with os.fdopen(fd, "wb") as f:
        f.write(load_any(path).SerializeToString())
    return tmp


def ort_session(model_bytes: bytes | str, threads: int = 1):
    """A CPU onnxruntime session of a serialized model or of a file (a bitmask zip expanded in memory,
    sparse-initializer files load natively) with a fixed thread count, so timings and checks are reproducible."""
    import onnxruntime as ort

    if isinstance(model_bytes, str) and model_bytes.endswith(BITMASK_SUFFIX):
        from tasks.deploy.sparse_storage import load_any

        model_bytes = load_any(model_bytes).SerializeToString()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def _load_onnxruntime(path: str, batch: int, threads: int):
    sess = ort_session(path, threads)
    name = sess.get_inputs()[0].name
    return (lambda x: sess.run(None, {name: x})[0]), {}


def _load_deepsparse(path: str, batch: int, threads: int):
    import deepsparse

    engine = deepsparse.compile_model(_plain_onnx_path(path), batch_size=batch, num_cores=threads)
    return (lambda x: engine.run([x])[0]), {"num_cores": threads}


def _load_openvino(path: str, batch: int, threads: int):
    import openvino as ov

    core = ov.Core()
    config = {
        "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": "f32",
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": 1,
    }
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
    """Per-call times (s) of every model, one sample of each per round in rotated order (a shared CPU's drift hits
    all alike), a sample repeating the call k times to last >= min_sample_s (k from the first model's warm-up)."""
    names = list(runners)
    for _ in range(warmup):
        for n in names:
            t = time.perf_counter()
            runners[n](x)
            if n == names[0]:
                first = time.perf_counter() - t
    k = max(1, round(min_sample_s / max(first, 1e-6))) if warmup else 1
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(runs):
        for n in names[r % len(names) :] + names[: r % len(names)]:
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

    module = __import__(a.runtime)
    hwm_start = vm_hwm_kib()
    x = np.random.default_rng(0).standard_normal((a.batch, *a.shape), dtype=np.float32)
    runners, applied, load_s = {}, {}, {}
    for path in a.models:
        t = time.perf_counter()
        runners[path], applied = LOADERS[a.runtime](path, a.batch, a.threads)
        load_s[path] = time.perf_counter() - t
    times = time_interleaved(runners, x, a.warmup, a.runs)
    result = {
        "runtime": a.runtime,
        "version": getattr(module, "__version__", None) or module.get_version(),
        "python": sys.executable,
        "batch": a.batch,
        "threads": a.threads,
        "options": applied,
        "load_s": load_s,
        "vmhwm_kib_after_import": hwm_start,
        "vmhwm_kib": vm_hwm_kib(),
    }
    if a.mode == "time":
        result["times_s"] = times
        result["median_s"] = {n: statistics.median(v) for n, v in times.items()}
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0
