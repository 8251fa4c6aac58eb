"""Benchmark: ProbMask's budget projection on a CPU, binned (the default) against the bisection over every score.

The projection runs after every ProbMask step over all keep-scores. Timed alone on scores shaped as a model's
prunable layers (the first step's: all 1 moved by Adam's first step, +-6e-3, 60% kept; a mid-run spread: uniform
on [-0.05, 1.05], 40% kept), then as part of whole ProbMask steps on ResNet-18 at 224 px, batch 1 (random weights
and inputs), the two ways alternating round after round in one process. Both reach the same v
(tests/unit/test_score_projection.py).

    OMP_NUM_THREADS=1 python -m benchmarks.speed.score_projection --output results/benchmarks/score_projection_cpu.txt
"""

from __future__ import annotations

import os
import statistics
import time

import torch

from baselines.score_projection import PROJECTIONS
from benchmarks.report import measure_then_emit, text_parser
from fcpts.core.masks import prunable_layers
from fcpts.methods import get_method
from tasks.imagenet.models import architecture

WAYS = ("bisection", "binned")  # before, now
KEPTS = {"first step": 0.6, "mid-run": 0.4}  # both need a shift v > 0


def layer_shapes(name: str) -> list[torch.Size]:
    return [m.weight.shape for m in prunable_layers(architecture(name)).values()]


def scores_like(shapes: list[torch.Size], spread: str, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if spread == "first step":
        return [1 + 6e-3 * (torch.rand(shape, generator=g) > 0.5).float().mul_(2).sub_(1) for shape in shapes]
    return [torch.rand(shape, generator=g).mul_(1.1).sub_(0.05) for shape in shapes]


def time_projection(way: str, shapes: list[torch.Size], spread: str, seed: int) -> float:
    scores = scores_like(shapes, spread, seed)
    start = time.perf_counter()
    PROJECTIONS[way](scores, KEPTS[spread])
    return time.perf_counter() - start


def probmask_step_s(way: str, iterations: int) -> float:
    """Median step of a ProbMask run on a fresh ResNet-18 (the same weights, inputs and noise every call)."""
    torch.manual_seed(0)
    model = architecture("resnet18")
    images = torch.randn(4, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    method = get_method("probmask")
    options = method.make_options(
        {"iterations": iterations, "batch_size": 1, "seed": 0}, {"progress": False, "log_every": 1, "projection": way}
    )
    _, report = method(model, images, 0.7, options)
    return statistics.median(row["step_s"] for row in report.history[1:])  # the first step warms up


def main(argv=None) -> int:
    p = text_parser("benchmarks.speed.score_projection", __doc__)
    p.add_argument("--models", nargs="+", default=["resnet18", "vit_base"], help="names of the ImageNet task's models")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=5, help="ProbMask steps a run (the first is not timed)")
    args = p.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    def measure() -> list[str]:
        lines = [
            f"ProbMask's projection, {torch.get_num_threads()} thread(s), {os.cpu_count()} CPUs; {args.rounds} "
            "rounds, the ways alternating (median)",
            f"{'scores of':32s} {'spread':11s} {'bisection':>10s} {'binned':>9s} {'ratio':>6s}  rounds",
        ]
        for model in args.models:
            shapes = layer_shapes(model)
            count = sum(s.numel() for s in shapes)
            for spread in ("first step", "mid-run"):
                times: dict[str, list[float]] = {way: [] for way in WAYS}
                for r in range(args.rounds):
                    for way in WAYS:
                        times[way].append(time_projection(way, shapes, spread, r))
                med = {way: statistics.median(times[way]) for way in WAYS}
                each = ", ".join(f"{a / b:.0f}" for a, b in zip(times["bisection"], times["binned"]))
                label = f"{model} ({count / 1e6:.1f} M)"
                lines.append(
                    f"{label:32s} {spread:11s} {med['bisection'] * 1000:7.0f} ms {med['binned'] * 1000:6.0f} ms "
                    f"{med['bisection'] / med['binned']:5.0f}x  {each}"
                )
        steps: dict[str, list[float]] = {way: [] for way in WAYS}
        for _ in range(args.rounds):
            for way in WAYS:
                steps[way].append(probmask_step_s(way, args.steps))
        med = {way: statistics.median(steps[way]) for way in WAYS}
        each = ", ".join(f"{a / b:.2f}" for a, b in zip(steps["bisection"], steps["binned"]))
        lines.append(
            f"ProbMask step on resnet18, 224 px, batch 1: bisection {med['bisection']:.2f} s, binned "
            f"{med['binned']:.2f} s, {med['bisection'] / med['binned']:.2f}x (rounds: {each})"
        )
        return lines

    measure_then_emit(measure, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
