"""Benchmark: an FCPTS step on a CPU by the size of the flat runs its masks and bridge work on (MAX_FLAT).

FCPTS masks all layers' weights at once on flat tensors of up to MAX_FLAT elements (fcpts/core/flat_weights.py),
several temporaries of that size a step. glibc serves a block over its mmap threshold (which it raises to at most
32 MB) with fresh pages each time, so a larger run's temporaries fault on every page each step. Each size runs in
a process of its own (the allocator's state is the process's), alternating round after round, on a stack of
2048x2048 Linear layers (4.2 M weights a layer, as ViT-L's MLP layers) at batch 1, where the per-weight work is
the step, as in the scale benchmark's CPU probes.

    OMP_NUM_THREADS=1 python -m benchmarks.speed.flat_runs --output results/benchmarks/flat_runs_cpu.txt
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from benchmarks.report import measure_then_emit, text_parser
from fcpts.core.flat_weights import MAX_FLAT
from tasks.grid.paths import REPO_ROOT

LIMITS = (2**24, MAX_FLAT)  # the runs before, the runs now

RUN = """
import json, resource, statistics, sys
import torch
from torch import nn
import fcpts.core.flat_weights as flat_weights
from fcpts.methods import get_method
limit, width, depth, steps = map(int, sys.argv[1:5])
flat_weights.MAX_FLAT = limit
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)], nn.Linear(width, 10))
data = [torch.randn(width, generator=torch.Generator().manual_seed(i)) for i in range(8)]
method = get_method("fcpts")
budget = {"iterations": steps + 2, "batch_size": 1, "seed": 0}
options = method.make_options(budget, {"log_every": 1, "progress": False})
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
_, report = method(model, data, 0.7, options)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
times = [row["step_s"] for row in report.history if "step_s" in row][2:]  # two warm-up steps
weights = sum(p.numel() for name, p in model.named_parameters() if name.endswith("weight"))
print(json.dumps({"step_s": statistics.median(times), "faults": faults, "weights": weights}))
"""


def one_run(limit: int, width: int, depth: int, steps: int) -> dict:
    """Median step seconds and the run's minor page faults, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", RUN, *map(str, (limit, width, depth, steps))],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = text_parser("benchmarks.speed.flat_runs", __doc__)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=16)
    p.add_argument("--steps", type=int, default=8, help="timed steps a process (after two warm-up steps)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)

    def measure() -> list[str]:
        runs: dict[int, list[dict]] = {limit: [] for limit in LIMITS}
        for _ in range(args.rounds):
            for limit in LIMITS:
                runs[limit].append(one_run(limit, args.width, args.depth, args.steps))
        weights = runs[LIMITS[0]][0]["weights"]
        lines = [
            f"FCPTS step on {args.depth} Linear({args.width}, {args.width}) layers and a classifier "
            f"({weights / 1e6:.0f} M weights), batch 1, 1 thread, {os.cpu_count()} CPUs; {args.rounds} processes a "
            f"run size, alternating, {args.steps} timed steps each (median over the processes' medians)",
            f"{'flat runs of at most':22s} {'step':>9s} {'minor page faults a run':>24s}",
        ]
        med = {}
        for limit in LIMITS:
            med[limit] = statistics.median(r["step_s"] for r in runs[limit])
            faults = statistics.median(r["faults"] for r in runs[limit])
            size = f"2^{limit.bit_length() - 1} ({limit * 4 / 2**20:.0f} MB)"
            lines.append(f"{size:22s} {med[limit] * 1000:6.0f} ms {faults:24,.0f}")
        rounds = [a["step_s"] / b["step_s"] for a, b in zip(runs[LIMITS[0]], runs[LIMITS[1]])]
        before, now = (f"2^{limit.bit_length() - 1}" for limit in LIMITS)
        each = ", ".join(f"{r:.2f}" for r in rounds)
        lines.append(f"{before} / {now}: {med[LIMITS[0]] / med[LIMITS[1]]:.2f}x (rounds: {each})")
        return lines

    measure_then_emit(measure, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
