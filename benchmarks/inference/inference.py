"""Benchmark: does unstructured sparsity buy latency, memory or file size on this machine? (Table 7)

Every runtime is timed against its own dense model in the same process, dense and sparse calls
interleaved round by round (order rotated) so drift of a shared CPU hits both alike; each latency is a
median after warm-up, each speed-up median dense time / median sparse time, printed with the quartiles
of the same-round ratios (the noise).

Models: ResNet-18- and MobileNetV2-shaped torchvision networks with random weights (latency does not
depend on the values) and uniform random unstructured sparsity at exactly the given rate in every
Conv2d/Linear, including the first conv, depthwise convs and the classifier; the real FCPTS CIFAR-10
ResNet-56 at 90% (a checkpoint from `python -m tasks.deploy --record ...`) against its dense weights.
BatchNorm is folded and models are exported to ONNX opset 17 as in `tasks.deploy`.

Runtimes: onnxruntime (the dense reference point), DeepSparse and OpenVINO through `tasks.deploy`'s
worker in their own virtual environments (missing ones are reported, not fatal), torch eager (oneDNN)
and torch with CSR sparse matmul for Linear and 1x1 Conv2d (the layers where a sparse GEMM applies
without im2col; 3x3 and depthwise convs stay dense).

    python -m benchmarks.inference.inference                       # writes results/tables/table7_inference.md
    python -m benchmarks.inference.inference --quick               # smoke run, tiny shapes, few repetitions
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.inference.inference_families import build_families, export_family
from benchmarks.inference.inference_measure import (
    EXTERNAL,
    TORCH_RUNTIMES,
    available_runtimes,
    file_bytes,
    measure_memory,
    time_external,
    time_torch,
)
from benchmarks.inference.inference_table import _speedup, write_table
from fcpts.core.io import write_json_atomic
from tasks.deploy.driver import DEPLOY_DIR, provenance
from tasks.grid.help import command_parser
from tasks.grid.paths import REPO_ROOT
from tasks.grid.records import command_line

TABLE = REPO_ROOT / "results" / "tables" / "table7_inference.md"
RAW = DEPLOY_DIR / "table7_inference.json"
CIFAR_CHECKPOINT = DEPLOY_DIR / "cifar10-resnet56-fcpts-sp90-fast-seed0.pt"
# Real sparse models from grid cells (their saved state dicts): the EfficientNet-Lite0 substitute
DEFAULT_RECORDS = [
    REPO_ROOT / "results/runs/imagenet/imagenet-val1300/efficientnet_lite0" / f
    for f in ("fcpts-sp50-cpu-seed0.json", "fcpts-sp60-cpu-seed0.json", "fcpts-sp70-cpu-seed0.json")
]


def parse_args(argv=None) -> argparse.Namespace:
    p = command_parser("python -m benchmarks.inference.inference", __doc__)
    p.add_argument("--families", nargs="+", default=["resnet18", "mobilenet_v2", "cifar", "records"])
    p.add_argument(
        "--sparsity",
        nargs="+",
        type=float,
        default=[0.5, 0.6, 0.7, 0.9],
        help="rates for the random-weight models (Table 7 has 50/60/70%%; 90%% is where sparse kernels start to pay)",
    )
    p.add_argument("--runtimes", nargs="+", default=EXTERNAL + TORCH_RUNTIMES)
    p.add_argument("--cifar-checkpoint", default=str(CIFAR_CHECKPOINT))
    p.add_argument(
        "--records",
        nargs="+",
        default=[str(r) for r in DEFAULT_RECORDS],
        help="run records whose saved sparse models join the table (family 'records')",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="keep the other families of the existing raw file; re-measure only --families",
    )
    p.add_argument("--data-root")
    p.add_argument("--size", type=int, default=224, help="input size of the ImageNet-shaped models")
    p.add_argument("--runs-b1", type=int, default=30)
    p.add_argument("--runs-b32", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--quick", action="store_true", help="smoke run: 64x64 inputs, 3 runs, table to a temp dir")
    p.add_argument("--table", default=str(TABLE))
    p.add_argument("--raw", default=str(RAW))
    p.add_argument("--render", metavar="RAW_JSON", help="measure nothing: rewrite the table from a raw file")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.render:
        result = json.loads(Path(args.render).read_text())
        result["rendered_by"] = command_line()
        write_table(result, Path(args.table))
        print(Path(args.table).read_text())
        return 0
    if args.quick:
        args.size, args.runs_b1, args.runs_b32, args.warmup = 64, 3, 3, 1
        quick_dir = Path(tempfile.mkdtemp(prefix="fcpts-inference-quick-"))
        args.table, args.raw = str(quick_dir / "table7.md"), str(quick_dir / "table7.json")
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    prov = provenance(args.threads)
    t0 = time.perf_counter()
    runtimes, missing = available_runtimes(args.runtimes)
    for rt, why in missing.items():
        print(f"[missing] {why}")
    work = Path(tempfile.mkdtemp(prefix="fcpts-inference-"))
    result = {
        "provenance": prov,
        "runs": {"1": args.runs_b1, "32": args.runs_b32},
        "warmup": args.warmup,
        "missing_runtimes": missing,
        "runtimes": {},
        "families": {},
    }
    merging = args.merge and Path(args.raw).is_file()
    if merging:
        result = json.loads(Path(args.raw).read_text())
        result.pop("rendered_by", None)
        if (result["runs"], result["warmup"]) != ({"1": args.runs_b1, "32": args.runs_b32}, args.warmup):
            print(
                f"error: --merge needs the raw file's repetitions {result['runs']}, warm-up {result['warmup']}",
                file=sys.stderr,
            )
            return 2
    try:
        for name, fam in build_families(args).items():
            export_family(fam, work)
            fam_t0 = time.perf_counter()
            fr: dict[str, Any] = {
                "shape": list(fam.shape),
                "note": fam.note,
                "sparsity": fam.sparsity,
                "latency": {},
                "file_bytes": file_bytes(fam),
                "memory": {},
                "onnx_max_abs_diff": fam.onnx_max_abs_diff,
                "provenance": {**provenance(args.threads), "command": command_line(), "merged": merging},
            }
            for batch, runs in (("1", args.runs_b1), ("32", args.runs_b32)):
                for rt in [r for r in runtimes if r in EXTERNAL]:
                    print(f"[time] {name} batch {batch} {rt}", flush=True)
                    res = time_external(rt, fam, int(batch), runs, args.warmup, args.threads)
                    fr["latency"].setdefault(rt, {})[batch] = res
                    result["runtimes"][rt] = f"{res['version']}, options {res['options']}"
                if "torch" in runtimes or "torch-csr" in runtimes:
                    print(f"[time] {name} batch {batch} torch, torch-csr", flush=True)
                    for rt, res in time_torch(fam, int(batch), runs, args.warmup).items():
                        if rt in runtimes:
                            fr["latency"].setdefault(rt, {})[batch] = res
                            result["runtimes"][rt] = f"{res['version']}, options {res['options']}"
                _print_progress(name, fr, batch)
            if not args.no_memory:
                print(f"[memory] {name}", flush=True)
                fr["memory"] = measure_memory(fam, runtimes, args.threads)
            fr["provenance"].update(loadavg_end=list(os.getloadavg()), wall_s=time.perf_counter() - fam_t0)
            result["families"][name] = fr
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not merging:  # a merge keeps the first run's provenance; families carry theirs
        result["loadavg_end"] = list(os.getloadavg())
        result["wall_s"] = time.perf_counter() - t0
        result["provenance"]["command"] = command_line()
    raw = Path(args.raw)
    result["raw"] = str(raw.relative_to(REPO_ROOT)) if raw.is_relative_to(REPO_ROOT) else str(raw)
    write_json_atomic(Path(args.raw), result)
    write_table(result, Path(args.table))
    print(Path(args.table).read_text())
    print(f"table: {args.table}\nraw: {args.raw}")
    return 0


def _print_progress(name: str, fr: dict, batch: str) -> None:
    for rt, pb in fr["latency"].items():
        if batch in pb:
            cells = ", ".join(f"{k} {v['median_ms']:.2f} ms ({_speedup(v)})" for k, v in pb[batch]["results"].items())
            print(f"  {name} b{batch} {rt}: {cells}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
