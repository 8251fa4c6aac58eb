"""Benchmark: obs's Hessian update for one batch, a few images at a time (the default) against the whole batch
unfolded at once, per layer shape, alternating in this one process.

A depthwise conv's inputs unfolded into 3x3 patches are 9x their size; for a batch at 112 px that is
gigabytes, and copying them costs more than the products. `GRAM_CHUNK_BYTES` bounds the copy; this prints
how much that saves on real layer shapes (random inputs: only speed is measured here; that both give the same
Hessian is tests/unit/test_obs.py's job).

    python -m benchmarks.speed.obs_hessian
    OMP_NUM_THREADS=1 python -m benchmarks.speed.obs_hessian --output results/benchmarks/obs_hessian_cpu.txt
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from baselines import obs as obs_module
from baselines.obs import LayerOBS
from benchmarks.report import emit, text_parser
from tasks.grid.records import device_description

SHAPES = {  # name: (layer, per-image input shape)
    "cifar-resnet 3x3 16->16 @32": (lambda: nn.Conv2d(16, 16, 3, padding=1, bias=False), (16, 32, 32)),
    "lite0 depthwise 3x3 32 @112": (lambda: nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), (32, 112, 112)),
    "lite0 depthwise 3x3 144 @56": (lambda: nn.Conv2d(144, 144, 3, padding=1, groups=144, bias=False), (144, 56, 56)),
    "lite0 1x1 672->112 @14": (lambda: nn.Conv2d(672, 112, 1, bias=False), (672, 14, 14)),
}


def update_seconds(layer: nn.Module, x: torch.Tensor, x_dense: torch.Tensor, chunk_bytes: int) -> float:
    """One add_batch with the dense model's inputs too (obs's default), with that chunk size."""
    before = obs_module.GRAM_CHUNK_BYTES
    obs_module.GRAM_CHUNK_BYTES = chunk_bytes
    try:
        tic = time.perf_counter()
        LayerOBS(layer).add_batch(x, x_dense)
        return time.perf_counter() - tic
    finally:
        obs_module.GRAM_CHUNK_BYTES = before


def main(argv=None) -> int:
    p = text_parser("benchmarks.speed.obs_hessian", __doc__)
    p.add_argument("--images", type=int, default=64, help="images in the batch (obs's default batch is 128)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    lines = [
        f"one Hessian update of {args.images} images (pruned and dense inputs), {device_description()}, "
        f"median of {args.rounds} rounds alternating; seconds",
        f"{'layer':30s} {'at once':>8s} {'chunked':>8s} {'ratio':>6s}",
    ]
    for name, (make, shape) in SHAPES.items():
        layer = make().requires_grad_(False)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(args.images, *shape, generator=gen)
        x_dense = x + 0.1 * torch.randn(x.shape, generator=gen)
        whole = 2**62  # one chunk: the batch unfolded and reordered at once
        times: dict[str, list[float]] = {"once": [], "chunked": []}
        for _ in range(args.rounds):
            times["once"].append(update_seconds(layer, x, x_dense, whole))
            times["chunked"].append(update_seconds(layer, x, x_dense, obs_module.GRAM_CHUNK_BYTES))
        once, chunked = statistics.median(times["once"]), statistics.median(times["chunked"])
        lines.append(f"{name:30s} {once:8.2f} {chunked:8.2f} {once / chunked:6.2f}")
    emit(lines, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
