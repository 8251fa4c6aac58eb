"""Benchmark: the host's time per calibration batch at 224 px, made in the training loop's own process or by
worker processes (`calibration_workers`).

Why: a training-loop step's batch is host work (a Dataset's decoding and random crops, the stack, the finiteness
check) before it is device work. On a GPU the loop queues a step and makes the next batch meanwhile, so a step
takes at least the time of a batch: made in the loop's process, one batch of ImageNet images through the
calibration transform takes many times an H200's ResNet-18 step (results/benchmarks/step_time_resnet18_224_cuda.txt).
Workers make the coming batches in parallel while the loop only takes them; this times exactly that, through the
loop's own `StepBatches`, on the ImageNet sample (`train/`, ResNet-18's calibration transform, decoded images
cached as the task caches them) and on the scale benchmark's synthetic images. Each count of workers is timed in
turn within a round, after a few batches that start the workers; medians over rounds.

    OMP_NUM_THREADS=1 python -m benchmarks.speed.batch_workers --out results/benchmarks/batch_workers_cpu.txt
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import Dataset

from benchmarks.report import measure_then_emit
from benchmarks.scale.scale_cell import SyntheticImages
from fcpts.core.batch_workers import usable_cpus
from fcpts.core.calibration import Calibration
from fcpts.core.loop import StepBatches
from tasks.grid.data import resolve_data_root
from tasks.imagenet.data import ImageFiles, imagenet_dir, list_split
from tasks.imagenet.models import architecture, preprocessing

WARM_BATCHES = 2  # batches taken before the clock starts: the workers' start-up, not their rate


def imagenet_sample(data_root: str | None, images: int) -> Dataset:
    """The first `images` of the ImageNet sample's train/ through ResNet-18's calibration transform (random
    resized crop, flip, normalisation), decoded images cached as the task caches them."""
    train = list_split(imagenet_dir(resolve_data_root(data_root)), "train")[:images]
    _, calib_tf, _ = preprocessing("resnet18", architecture("resnet18"))
    return ImageFiles(train, calib_tf, cache=True)


def ms_per_batch(calib: Calibration, workers: int, first: int, batches: int) -> float:
    """The loop process's time per batch over `batches` steps from `first` (after WARM_BATCHES more)."""
    steps = StepBatches(calib, torch.device("cpu"))
    stop = first + WARM_BATCHES + batches
    with steps.from_workers(workers, first, stop):
        for step in range(first, first + WARM_BATCHES):
            steps(step)
        t = time.perf_counter()
        for step in range(first + WARM_BATCHES, stop):
            steps(step)
        return (time.perf_counter() - t) * 1000 / batches


def measure(data_root: str | None, images: int, batch_size: int, batches: int, rounds: int, workers: list[int]):
    datasets = {
        "imagenet sample, calibration transform": imagenet_sample(data_root, images),
        "synthetic normal images (scale benchmark)": SyntheticImages(images),
    }
    lines = [
        f"batch {batch_size} at 224 px from {images} images, {usable_cpus()} CPUs, {torch.get_num_threads()} torch "
        f"threads in the loop's process; ms per batch taken by the loop (median over {rounds} rounds of {batches} "
        "batches, each count of workers in turn)",
        f"{'data':44s}" + "".join(f"{f'{n} workers':>12s}" for n in workers) + "   fastest / none",
    ]
    for name, data in datasets.items():
        calib = Calibration(data, batch_size, seed=0)
        for step in range(len(data) // batch_size):  # one epoch here first: the decoded images are cached before
            calib.batch(step)  # the workers start, as they are after a run's first epoch
        times: dict[int, list[float]] = {n: [] for n in workers}
        for r in range(rounds):
            for n in workers:
                times[n].append(ms_per_batch(calib, n, first=r * (WARM_BATCHES + batches), batches=batches))
        ms = {n: statistics.median(ts) for n, ts in times.items()}
        ratio = ms[0] / min(ms.values()) if 0 in ms else float("nan")
        lines.append(f"{name:44s}" + "".join(f"{ms[n]:12.1f}" for n in workers) + f"   {ratio:.2f}x")
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-root", help="the folder holding imagenet/ (default: the data-root rule of the tasks)")
    for flag, default in (("--images", 256), ("--batch-size", 64), ("--batches", 6), ("--rounds", 3)):
        p.add_argument(flag, type=int, default=default)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="worker counts to time (0: in process)")
    p.add_argument("--out", help="also write the output (with its provenance) to this file")
    args = p.parse_args(argv)
    if 0 not in args.workers or min(args.workers) < 0:
        p.error("--workers must include 0 (batches made in the loop's process, the reference) and no negative count")
    run = lambda: measure(args.data_root, args.images, args.batch_size, args.batches, args.rounds, args.workers)  # noqa: E731
    measure_then_emit(run, args.out)


if __name__ == "__main__":
    main()
