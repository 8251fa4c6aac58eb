"""Benchmark: one POT reconstruction step, its Gram gradient written down against autograd's, eager against replayed
from a CUDA graph; per-step time from runs of `--steps` and twice as many differenced, medians."""

from __future__ import annotations

import copy
import statistics
import time

import torch

import fcpts
from benchmarks import parser
from benchmarks.report import measure_then_emit, synchronize
from benchmarks.speed.step_time import model_and_images
from fcpts.core.options import resolve_device
from tasks.grid.help import default_device
from tasks.grid.records import device_description

GRADIENTS = ("closed-form", "autograd")


def pot_seconds(
    model: torch.nn.Module, x: torch.Tensor, layers: str, steps: int, options: dict, device: torch.device
) -> float:
    """Wall time of POT on the layers whose names start with `layers`, `steps` Adam steps each (none stop early)."""
    pot = fcpts.get_method("pot-l2norm")
    chosen = lambda module, name: name.startswith(layers)  # noqa: E731
    synchronize(device)
    tic = time.perf_counter()
    pot(
        copy.deepcopy(model), x, 0.8, iterations=steps, batch_size=64, early_stop_loss=0.0, progress=False,
        filter_fn=chosen, device=str(device), **options,
    )  # fmt: skip
    synchronize(device)
    return time.perf_counter() - tic


def ways(device: torch.device) -> dict[str, bool]:
    """How the steps run, by `cuda_graphs`: eager, and on a GPU also replayed from a CUDA graph."""
    return {"eager": False, "cuda graphs": True} if device.type == "cuda" else {"eager": False}


def run(args) -> list[str]:
    device = resolve_device(default_device(args.device))
    torch.manual_seed(0)
    model, size, _ = model_and_images(args.model)
    x = torch.randn(args.images, 3, size, size)
    per_step: dict[tuple[str, str], list[float]] = {(g, way): [] for way in ways(device) for g in GRADIENTS}
    pot_seconds(model, x, args.layers, 2, {}, device)  # first-call costs (CUDA context, cuBLAS) outside the timing
    for _ in range(args.rounds):
        for gradient, way in per_step:
            options = {"gram_gradient": gradient, "cuda_graphs": ways(device)[way]}
            short = pot_seconds(model, x, args.layers, args.steps, options, device)
            long = pot_seconds(model, x, args.layers, 2 * args.steps, options, device)
            per_step[gradient, way].append((long - short) / args.steps)
    median = {key: statistics.median(times) for key, times in per_step.items()}
    lines = [
        f"model {args.model} (random weights) at {size} px, POT L2Norm 80%, layers {args.layers}* (same-shape ones "
        f"stacked), batch 64 of {args.images} images, {device_description(device)}; step time from runs of "
        f"{args.steps} and {2 * args.steps} steps differenced, median of {args.rounds} rounds",
        *(f"pot step, {f'{g}, {way}':24s}: {seconds * 1000:9.3f} ms" for (g, way), seconds in median.items()),
    ]
    for way in ways(device):
        closed, auto = median["closed-form", way], median["autograd", way]
        lines.append(f"closed-form gradient over autograd's, {way}: {auto / closed:.2f}x")
    if device.type == "cuda":
        eager, graphed = median["closed-form", "eager"], median["closed-form", "cuda graphs"]
        lines.append(f"cuda graphs over eager (closed-form): {eager / graphed:.2f}x")
    fastest = min(median.values())
    lines.append(f"a group's 20,000 steps at the fastest: {20_000 * fastest:.0f} s")
    return lines


def main(argv=None) -> None:
    args = parser("pot-step-time").parse_args(argv)
    measure_then_emit(lambda: run(args), args.out)
