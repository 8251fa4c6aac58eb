"""The inference process (`python -m tasks.deploy worker ...`): it imports only numpy, the runtime and, for
bitmask files, onnx (never torch), so it runs in a runtime's own venv and its VmHWM is the inference's own."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from tasks.deploy.runtimes import RESULT_MARK  # no torch there: workers run in venvs without it

# sparse_storage's file kinds, by name, so a worker for a plain .onnx never imports onnx (memory, venvs)
BITMASK_SUFFIX, SPARSE_ONNX_SUFFIX = ".bitmask.zip", ".sparse.onnx"


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
