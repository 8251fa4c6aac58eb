"""Benchmark: POT's layer reconstruction with the forward loss vs the Gram-statistics loss, per layer shape.

For each layer shape (real shapes from CIFAR ResNets and EfficientNet-Lite0), times the set-up and
`--iterations` Adam-free loss+backward steps of four objectives on the same fixed batches, in this one
process: the layer's forward, per-image Gram statistics summed per step, per-batch Gram statistics (POT's
default with its fixed batches) with autograd's gradient, and the same with the gradient in closed form
(`gram_gradient="closed-form"`, POT's default: one product with the Gram matrix a step). It prints the
measured ratios of the forward to the per-batch Gram objective beside the cost estimates POT chooses with
(`baselines.pot_objective.gram_plan`, for either gradient). Inputs are random: only speed is measured here;
that all give the same loss and gradients is tests/unit/test_pot_objective.py's job.

    python -m benchmarks.speed.pot_objective                 # CIFAR and Lite0 shapes, 100 iterations
    python -m benchmarks.speed.pot_objective --images 256    # fewer cached images: a quicker look
    python -m benchmarks.speed.pot_objective --images 256 --iterations 20 --output results/benchmarks/pot_objective.txt
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from datetime import datetime, timezone

import torch
from torch import nn

from baselines.pot_objective import ForwardObjective, GramObjective, GramStack, gram_plan
from fcpts.core.io import write_text_atomic
from tasks.grid.records import device_description, git_commit

SHAPES = {  # name: (layer, per-image input shape, images as in the profiles)
    "cifar-resnet 3x3 16->16 @32": (lambda: nn.Conv2d(16, 16, 3, padding=1), (16, 32, 32), 1024),
    "cifar-resnet 3x3 64->64 @8": (lambda: nn.Conv2d(64, 64, 3, padding=1), (64, 8, 8), 1024),
    "lite0 1x1 16->96 @112": (lambda: nn.Conv2d(16, 96, 1), (16, 112, 112), 1000),
    "lite0 depthwise 3x3 144 @56": (lambda: nn.Conv2d(144, 144, 3, padding=1, groups=144), (144, 56, 56), 1000),
    "lite0 1x1 672->112 @14": (lambda: nn.Conv2d(672, 112, 1), (672, 14, 14), 1000),
}


def time_objective(
    cls, layer: nn.Module, inputs: torch.Tensor, iterations: int, batches: torch.Tensor, per_batch: bool
) -> tuple[float, float]:
    """(set-up seconds, seconds for the iterations) of one objective; the same batches for every variant."""
    w_dense, b_dense = layer.weight.detach(), layer.bias.detach()
    weight = (w_dense * 0.5).requires_grad_(True)
    bias = b_dense.clone().requires_grad_(True)
    draws = torch.randint(len(batches), (iterations,), generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    objective = cls(layer, inputs, batches if per_batch else None)
    t1 = time.perf_counter()
    for b in draws:
        idx = b.view(1) if per_batch else batches[b]
        weight.grad = bias.grad = None
        objective.loss(idx, weight, bias, w_dense, b_dense).backward()
    return t1 - t0, time.perf_counter() - t1


def time_closed_form(layer: nn.Module, inputs: torch.Tensor, iterations: int, batches: torch.Tensor) -> float:
    """Seconds for the iterations of the per-batch Gram objective with its gradient in closed form, as POT steps
    a group of one layer (its set-up is the per-batch objective's)."""
    w_dense, b_dense = layer.weight.detach()[None], layer.bias.detach()[None]
    weight, bias = (w_dense * 0.5).requires_grad_(True), b_dense.clone().requires_grad_(True)
    draws = torch.randint(len(batches), (iterations,), generator=torch.Generator().manual_seed(0))
    stack = GramStack([GramObjective(layer, inputs, batches)])
    t = time.perf_counter()
    for b in draws:
        stack.losses_and_gradients(b.view(1, 1), weight, bias, w_dense, b_dense)
    return time.perf_counter() - t


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--images", type=int, help="cached images per layer (default: as in the profiles)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--output", help="also write the printed text to this file (atomically, when done)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    lines: list[str] = []

    def emit(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    argv_text = shlex.join(sys.argv[1:] if argv is None else argv)
    emit(f"# python -m benchmarks.speed.pot_objective {argv_text}".rstrip())
    emit(
        f"# commit {git_commit()}; {datetime.now(timezone.utc).isoformat(timespec='seconds')}; "
        f"{device_description('cpu')}; load average at start {' / '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    emit(f"{args.iterations} iterations of {args.batch_size}, {args.threads} thread(s); seconds")
    emit(
        f"{'layer':32s} {'forward':>9s} {'gram per image':>15s} {'gram per batch':>15s} {'closed form':>11s} "
        f"{'forward / per-batch':>19s} {'estimate':>9s} {'closed form':>11s} {'estimate':>9s}"
    )
    for name, (make, shape, images) in SHAPES.items():
        torch.manual_seed(0)
        layer, n = make(), args.images or images
        inputs = torch.randn(n, *shape)
        batches = torch.randperm(n, generator=torch.Generator().manual_seed(1))[
            : n // args.batch_size * args.batch_size
        ]
        batches = batches.view(-1, args.batch_size)
        plan = gram_plan(layer, inputs, n, args.iterations, args.batch_size, args.batch_size)
        closed_plan = gram_plan(layer, inputs, n, args.iterations, args.batch_size, args.batch_size, "closed-form")
        _, forward_s = time_objective(ForwardObjective, layer, inputs, args.iterations, batches, False)
        image_setup, image_s = time_objective(GramObjective, layer, inputs, args.iterations, batches, False)
        batch_setup, batch_s = time_objective(GramObjective, layer, inputs, args.iterations, batches, True)
        closed_s = time_closed_form(layer, inputs, args.iterations, batches)
        emit(
            f"{name:32s} {forward_s:9.2f} {image_setup:7.2f} + {image_s:5.2f} {batch_setup:7.2f} + {batch_s:5.2f} "
            f"{closed_s:11.2f} {forward_s / (batch_setup + batch_s):19.2f} {plan['forward_s'] / plan['gram_s']:9.2f} "
            f"{forward_s / (batch_setup + closed_s):11.2f} {closed_plan['forward_s'] / closed_plan['gram_s']:9.2f}"
        )
        del inputs
    if args.output:
        write_text_atomic(args.output, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
