"""Benchmark: whole runs of methods over FCPTS's on one model, alternated in one process, a ramp's steps apart;
`--quickstart`: every method's first call on the README Quickstart under its defaults (within 30 s)."""

from __future__ import annotations

import copy
import re
import statistics
import time

import torch
from torch.utils.data import Dataset, TensorDataset

from benchmarks import parser
from benchmarks.report import measure_then_emit
from fcpts.core.options import resolve_device
from fcpts.methods import METHODS, get_method
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.help import default_device
from tasks.grid.paths import REPO_ROOT
from tasks.grid.records import device_description

BASELINE = "fcpts"
README = REPO_ROOT / "README.md"
QUICKSTART_LIMIT_S = 30.0


def timed_run(method: str, model, images: Dataset, target: float, **options) -> tuple[float, list[float]]:
    """(wall seconds of the whole call, each step's seconds) of one run of `method`."""
    t = time.perf_counter()
    _, report = get_method(method)(copy.deepcopy(model), images, target, progress=False, log_every=1, **options)
    return time.perf_counter() - t, [row["step_s"] for row in report.history]


def run(args) -> list[str]:
    device = resolve_device(default_device(args.device))
    torch.manual_seed(0)
    model = cifar_resnet(args.model).to(device)
    images = TensorDataset(torch.randn(args.images, 3, 32, 32))  # not a tensor: fetched item by item, as datasets are
    budget = {"iterations": args.iterations, "batch_size": args.batch_size, "device": str(device)}
    methods = [BASELINE, *[m for m in args.methods if m != BASELINE]]
    walls: dict[str, list[float]] = {m: [] for m in methods}
    steps: dict[str, list[list[float]]] = {m: [] for m in methods}
    for method in methods:  # untimed: the first run of a process pays one-off costs (allocator, kernels' setup)
        timed_run(method, model, images, args.target, **{**budget, "iterations": 2})
    for _ in range(args.rounds):
        for method in methods:
            wall, step_s = timed_run(method, model, images, args.target, **budget)
            walls[method].append(wall)
            steps[method].append(step_s)
    lines = [
        f"model {args.model}, {args.images} images, batch {args.batch_size}, {args.iterations} iterations, target "
        f"{args.target:.0%}, {device_description(device)}, {args.rounds} rounds of one run per method in turn "
        f"(ratio: median over rounds of the run over the {BASELINE} run before it)",
    ]
    for method in methods:
        ratio = statistics.median(w / b for w, b in zip(walls[method], walls[BASELINE]))
        ramp_for = getattr(get_method(method).options(), "ramp_for", None)  # steps of its ramp at this target
        ramp = round(ramp_for(args.target) * args.iterations) if ramp_for else 0
        per_step = [s for run_steps in steps[method] for s in run_steps[ramp:]]
        line = (
            f"{method:12s}: run {statistics.median(walls[method]):8.1f} s, ratio to {BASELINE} {ratio:.2f}; "
            f"step {statistics.median(per_step) * 1000:8.1f} ms"
        )
        if ramp:
            ramp_s = [s for run_steps in steps[method] for s in run_steps[:ramp]]
            line += f" after its ramp, {statistics.median(ramp_s) * 1000:8.1f} ms in its ramp ({ramp} steps)"
        lines.append(line + "; runs " + ", ".join(f"{w:.1f}" for w in walls[method]) + " s")
    return lines


def quickstart() -> list[str]:
    """Each registered method once, on the Quickstart's model and calibration tensor as the README defines them."""
    code = re.search(r"## Quickstart\n\n```python\n(.*?)```", README.read_text(), re.S)
    if code is None:
        raise SystemExit("README.md has no Quickstart code block")
    scope: dict = {}
    torch.manual_seed(0)
    exec(code.group(1).split("sparse, report")[0], scope)
    lines = [f"README Quickstart model and data, library defaults, target 90%, {device_description('cpu')}"]
    for name in METHODS:
        t = time.perf_counter()
        _, report = get_method(name)(scope["my_model"](), scope["calibration"], 0.9, progress=False)
        wall = time.perf_counter() - t
        verdict = "within" if wall <= QUICKSTART_LIMIT_S else "OVER"
        budget = report.options.get("iterations")
        lines.append(
            f"{name:17s}: {wall:6.1f} s ({verdict} {QUICKSTART_LIMIT_S:.0f} s), iterations {budget}, "
            f"achieved {report.achieved_sparsity:.4f}"
        )
    return lines


def main(argv=None) -> None:
    args = parser("method-time").parse_args(argv)
    if args.quickstart:
        measure_then_emit(quickstart, args.out)
        return
    measure_then_emit(lambda: run(args), args.out)
