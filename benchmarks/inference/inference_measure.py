"""Latency, peak memory and file size of a family's models: every runtime is timed against its own dense
model with calls interleaved, so a shared CPU's drift hits dense and sparse alike; a missing runtime is
reported, not fatal.
"""

from __future__ import annotations

import statistics

import torch

from benchmarks.inference.inference_csr import to_torch_csr
from benchmarks.inference.inference_families import Family
from tasks.deploy.runtimes import RuntimeNotInstalled, peak_memory, run_worker, runtime_version
from tasks.deploy.sparse_storage import zlib_size
from tasks.deploy.worker import time_interleaved

EXTERNAL = ["onnxruntime", "deepsparse", "openvino"]
TORCH_RUNTIMES = ["torch", "torch-csr"]


def speedups(times: dict, dense) -> dict:
    """Per model: median latency (ms), speed-up = median dense time / median sparse time over the same
    interleaved rounds, and the quartiles of the same-round ratios (their spread is the noise: on a
    busy CPU single rounds swing by 2x when another job lands on the core). Raw times are kept."""
    out = {}
    for k, v in times.items():
        q = statistics.quantiles([d / t for d, t in zip(times[dense], v)], n=4) if len(v) > 1 else [1.0] * 3
        out[k] = {
            "median_ms": 1e3 * statistics.median(v),
            "runs": len(v),
            "speedup": statistics.median(times[dense]) / statistics.median(v),
            "round_ratio_q25_q50_q75": q,
            "times_ms": [round(1e3 * t, 4) for t in v],
        }
    return out


def time_external(runtime: str, fam: Family, batch: int, runs: int, warmup: int, threads: int) -> dict:
    files = [str(fam.files[k]["dense"]) for k in fam.models]
    r = run_worker(
        runtime,
        [
            "--models",
            *files,
            "--shape",
            *map(str, fam.shape),
            "--batch",
            str(batch),
            "--runs",
            str(runs),
            "--warmup",
            str(warmup),
        ],
        threads,
    )
    times = {k: r["times_s"][f] for k, f in zip(fam.models, files)}
    return {"version": r["version"], "options": r["options"], "results": speedups(times, "dense")}


@torch.inference_mode()
def time_torch(fam: Family, batch: int, runs: int, warmup: int) -> dict[str, dict]:
    """torch eager and torch-CSR, all models of the family interleaved in this process."""
    x = torch.randn(batch, *fam.shape)
    runners, moved = {}, 0.0
    for label, m in fam.models.items():
        runners[("torch", label)] = m
        if label != "dense":
            csr, moved = to_torch_csr(m)
            err = (csr(x[:2]) - m(x[:2])).abs().max().item()
            assert err < 1e-3, f"CSR model differs from the dense one by {err}"
            runners[("torch-csr", label)] = csr
    times = time_interleaved(runners, x, warmup, runs)
    out: dict[str, dict] = {"torch": {}, "torch-csr": {}}
    for (rt, label), res in speedups(times, ("torch", "dense")).items():
        out[rt][label] = res
    out["torch-csr"]["dense"] = out["torch"]["dense"]  # CSR's own dense reference: dense kernels
    return {
        "torch": {"version": torch.__version__, "options": {}, "results": out["torch"]},
        "torch-csr": {
            "version": torch.__version__,
            "options": {"csr_weight_share": moved},
            "results": out["torch-csr"],
        },
    }


def measure_memory(fam: Family, runtimes: list[str], threads: int) -> dict:
    """VmHWM of a fresh process per file: onnxruntime for each storage format, DeepSparse for the plain file."""
    mem = {}
    for label, files in fam.files.items():
        mem[label] = {
            f"onnxruntime:{kind}": peak_memory("onnxruntime", p, fam.shape, threads) for kind, p in files.items()
        }
        if "deepsparse" in runtimes:
            mem[label]["deepsparse:dense"] = peak_memory("deepsparse", files["dense"], fam.shape, threads)
    return mem


def file_bytes(fam: Family) -> dict:
    return {
        label: {**{k: p.stat().st_size for k, p in files.items()}, "dense_zlib": zlib_size(files["dense"])}
        for label, files in fam.files.items()
    }


def available_runtimes(wanted: list[str]) -> tuple[list[str], dict[str, str]]:
    """The runtimes that import, and for the others the reason with install instructions."""
    ok, missing = [], {}
    for rt in wanted:
        if rt in TORCH_RUNTIMES:
            ok.append(rt)
            continue
        try:
            runtime_version(rt)
            ok.append(rt)
        except RuntimeNotInstalled as e:
            missing[rt] = str(e)
    return ok, missing
