"""Benchmark: obs's wall time on a torchvision ResNet-18 (random weights, seeded), by stage, with the mask's hash.

The "error" allocation prunes every layer at a dozen levels; this is where obs spent most of its time on
ImageNet-sized layers. The mask hash lets two versions of obs be compared: equal hashes, equal masks.

    OMP_NUM_THREADS=1 python -m benchmarks.speed.obs_time --output results/benchmarks/obs_time_cpu.txt
"""

from __future__ import annotations

import time

import torch
import torchvision

import fcpts
from benchmarks.report import emit, text_parser
from tasks.grid.records import device_description
from tasks.grid.runner import mask_sha256


def main(argv=None) -> int:
    p = text_parser("benchmarks.speed.obs_time", __doc__)
    p.add_argument("--images", type=int, default=16)
    p.add_argument("--size", type=int, default=64, help="image side in pixels")
    p.add_argument("--target", type=float, default=0.7)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    images = torch.randn(args.images, 3, args.size, args.size, generator=torch.Generator().manual_seed(1))
    tic, cpu = time.perf_counter(), time.process_time()
    model, report = fcpts.get_method("obs")(model, images, args.target, progress=False)
    total, cpu = time.perf_counter() - tic, time.process_time() - cpu
    lines = [
        f"obs on torchvision resnet18 (random weights), {args.images} images at {args.size} px, target "
        f"{args.target}, {device_description()}",
        f"total {total:.1f} s, allocation (Hessians + error curves) {report.extra['allocation_s']:.1f} s, "
        f"sequential pruning {total - report.extra['allocation_s']:.1f} s; process CPU time {cpu:.1f} s (wall time "
        "depends on what else runs on the machine, CPU time much less)",
        f"achieved sparsity {report.achieved_sparsity:.6f}, mask sha256 {mask_sha256(model)}",
    ]
    emit(lines, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
