"""Benchmark: one POT reconstruction step, eager against replayed from a CUDA graph, on the device named.

POT's paper budget is 20,000 Adam steps per group of layers, and a step is a few small matrix products: on a GPU
an eager step is bound by Python launching its ~60 kernels, not by the GPU. The step is timed as POT runs it, on
the first stage of a CIFAR ResNet (one stacked group of same-shape layers), by differencing two runs of
`--steps` and `2 * --steps` steps (the set-up cancels out), eager and with `cuda_graphs`, interleaved `--rounds`
times; medians. On a CPU both lines are the eager step (graphs are a GPU's).

    python -m benchmarks.speed.pot_step_time --device cuda --out results/benchmarks/pot_step_time_cuda.txt
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

import fcpts
from benchmarks.report import measure_then_emit
from fcpts.core.options import resolve_device
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.records import device_description


def pot_seconds(model: torch.nn.Module, x: torch.Tensor, steps: int, graphs: bool, device: torch.device) -> float:
    """Wall time of POT on the model's first stage with `steps` Adam steps (none stop early)."""
    pot = fcpts.get_method("pot-l2norm")
    first_stage = lambda module, name: name.startswith("layer1.")  # noqa: E731
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    tic = time.perf_counter()
    pot(
        copy.deepcopy(model), x, 0.8, iterations=steps, batch_size=64, early_stop_loss=0.0, progress=False,
        filter_fn=first_stage, device=str(device), cuda_graphs=graphs,
    )  # fmt: skip
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - tic


def run(args: argparse.Namespace) -> list[str]:
    device = resolve_device(args.device)
    torch.manual_seed(0)
    model = cifar_resnet(args.model)
    x = torch.randn(args.images, 3, 32, 32)
    per_step: dict[bool, list[float]] = {False: [], True: []}
    pot_seconds(model, x, 2, True, device)  # first-call costs (CUDA context, cuBLAS) outside the timing
    for _ in range(args.rounds):
        for graphs in (False, True):
            short = pot_seconds(model, x, args.steps, graphs, device)
            long = pot_seconds(model, x, 2 * args.steps, graphs, device)
            per_step[graphs].append((long - short) / args.steps)
    eager, graphed = statistics.median(per_step[False]), statistics.median(per_step[True])
    how = "replayed" if device.type == "cuda" else "eager: no GPU"
    return [
        f"model {args.model} (random weights), POT L2Norm 80%, first stage's layers as one stacked group, batch 64 "
        f"of {args.images} images, {device_description(device)}; step time from runs of {args.steps} and "
        f"{2 * args.steps} steps differenced, median of {args.rounds} rounds",
        f"pot step, eager       : {eager * 1000:8.3f} ms",
        f"pot step, cuda graphs : {graphed * 1000:8.3f} ms ({how})",
        f"speed-up {eager / graphed:.2f}x; a group's 20,000 steps: {20_000 * eager:.0f} s eager, "
        f"{20_000 * graphed:.0f} s with graphs",
    ]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet32")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--steps", type=int, default=500, help="the shorter run's steps (the longer runs twice as many)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", help="also write the output (with its provenance) to this file")
    args = p.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or args.images < 64:
        p.error("--steps and --rounds must be at least 1, --images at least 64 (one batch)")
    measure_then_emit(lambda: run(args), args.out)


if __name__ == "__main__":
    main()
