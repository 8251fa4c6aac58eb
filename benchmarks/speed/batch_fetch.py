"""Benchmark: the host's work to fetch one calibration batch at 224 px, and what its finiteness check costs.

Why: every training-loop step fetches its batch from the calibration Dataset on the host (index, stack, check,
then to the device). On an H200 a ResNet-18 FCPTS step at batch 64 and 224 px took 44 ms against a plain step's
10 ms, and one batch's fetch, stack and copy alone took 13 ms there (docs/notebook/benchmarks.md): host time the
device waits for. The check that no image holds NaN or Inf read every value and wrote a mask as large; it now
sums the batch once (`fcpts.core.calibration.all_finite`). Both checks are timed here, alternating, on the same
batch, with the whole `Calibration.batch` and its stack beside them (medians over rounds).

    OMP_NUM_THREADS=1 python -m benchmarks.speed.batch_fetch --out results/benchmarks/batch_fetch_cpu.txt
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from benchmarks.report import measure_then_emit
from benchmarks.speed.method_time import Images
from fcpts.core.calibration import Calibration, all_finite


def median_ms(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Each function's median time in ms, the functions alternating within each round (after one untimed call)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) * 1000 for name, ts in times.items()}


def measure(batch_size: int, size: int, rounds: int) -> list[str]:
    x = torch.randn(batch_size, 3, size, size)
    calibration = Calibration(Images(x), batch_size, seed=0)
    batch = calibration.batch(0)
    ms = median_ms(
        {
            "Calibration.batch (index, stack, checks)": lambda: calibration.batch(1),
            "stack alone": lambda: torch.stack([x[i] for i in range(batch_size)]),
            "finiteness, element-wise (before)": lambda: bool(torch.isfinite(batch).all()),
            "finiteness, one sum (all_finite)": lambda: all_finite(batch),
        },
        rounds,
    )
    lines = [
        f"batch {batch_size} at {size} px ({batch.numel() / 1e6:.1f} million floats), {torch.get_num_threads()} "
        f"torch threads, median over {rounds} rounds"
    ]
    lines += [f"{name:42s}: {value:8.2f} ms" for name, value in ms.items()]
    before, after = ms["finiteness, element-wise (before)"], ms["finiteness, one sum (all_finite)"]
    lines.append(f"finiteness check: {before / after:.1f}x faster as one sum")
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default in (("--batch-size", 64), ("--size", 224), ("--rounds", 20)):
        p.add_argument(flag, type=int, default=default)
    p.add_argument("--out", help="also write the output (with its provenance) to this file")
    args = p.parse_args(argv)
    measure_then_emit(lambda: measure(args.batch_size, args.size, args.rounds), args.out)


if __name__ == "__main__":
    main()
