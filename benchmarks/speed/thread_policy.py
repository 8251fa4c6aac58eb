"""Benchmark: an FCPTS step on a CPU, alone and beside 1 and 2 busy processes, under each thread count and OpenMP
wait policy, to pick the defaults every command starts torch with (tasks/__init__.py).

While an OpenMP thread waits at a barrier it spins by default; beside a busy process the spinning threads take
CPU from the threads that still have work, and a step slows by more than the share of the CPU it lost. PASSIVE
makes waiting threads sleep. Fewer threads than cores avoids the barrier waits altogether. Thread counts: torch's
default (one per core), 1, and `adaptive` (one per core idle when the process starts: tasks.adaptive_threads,
the choice ADAPTIVE_THREADS turns on). The policy is read once, when the OpenMP runtime starts (at torch's
import), so each configuration runs in a fresh process, started with OMP_NUM_THREADS and OMP_WAIT_POLICY unset
or set as configured; competitors (`while True: pass`, one core each) start first. Configurations alternate,
round after round; the medians of FCPTS's own per-step times (its report's history, after one warm-up step) are
compared. `vs share` is a step's time over what the fastest configuration alone would take on the CPU share left
to it (C cores shared by 1 + k busy processes: min(1, C / (1 + k)) of the machine); at most 1.00 means it
degrades no worse than its share. The winner is the configuration whose worst `vs share` is lowest.

On a quiet machine (about 5 minutes on 2 cores; results are meaningless if other work runs):

    python -m benchmarks thread-policy --output results/benchmarks/thread_policy_cpu.txt
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from itertools import product

from benchmarks.report import emit, text_parser
from tasks import usable_cpus

BUSY_COUNTS = (0, 1, 2)
THREADS = ("default", "1", "adaptive")
WAIT_POLICIES = (None, "PASSIVE")  # None: OpenMP's default (spin, then sleep)

# torch first, so the wait policy is the configured one (importing `tasks` sets PASSIVE unless one was set)
STEP = """
import statistics, sys
import torch
import fcpts, tasks
from benchmarks.speed.method_time import Images
from tasks.grid.cifar_models import cifar_resnet
model_name, steps, threads, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
if threads == "adaptive":
    torch.set_num_threads(tasks.adaptive_threads(tasks.usable_cpus(), tasks.idle_cores()))
elif threads != "default":
    torch.set_num_threads(int(threads))
torch.manual_seed(0)
_, report = fcpts.sparsify(cifar_resnet(model_name), Images(torch.randn(batch, 3, 32, 32)), 0.9,
                           iterations=steps + 1, batch_size=batch, progress=False, log_every=1, device="cpu")
print(statistics.median(h["step_s"] for h in report.history[1:]), torch.get_num_threads())
"""

BUSY = "while True: pass"


def configurations(
    busy: tuple[int, ...] = BUSY_COUNTS, threads: tuple[str, ...] = THREADS, policies: tuple = WAIT_POLICIES
) -> list[tuple[int, str, str | None]]:
    """Every (busy competitors, threads, wait policy), competitors outermost so a round starts and stops each
    count of them once."""
    return list(product(busy, threads, policies))


def fair_share(cpus: int, busy: int) -> float:
    """The fraction of the machine one process can have beside `busy` single-thread processes."""
    return min(1.0, cpus / (1 + busy))


def vs_share(seconds: float, best_alone: float, cpus: int, busy: int) -> float:
    """A step's time over the fastest step alone slowed to the share left: at most 1 degrades no worse than it."""
    return seconds * fair_share(cpus, busy) / best_alone


def to_adopt(threads: str, policy: str | None) -> str:
    """What to change in tasks/__init__.py for every command to start with the winning configuration."""
    how = {
        "adaptive": "set ADAPTIVE_THREADS = True",
        "default": "keep ADAPTIVE_THREADS = False",
        "1": "one thread always has no switch there (adaptive is one thread under load)",
    }[threads]
    return f"tasks/__init__.py: {how}" + ("; drop the PASSIVE default" if policy is None else "")


def step_seconds(model: str, steps: int, batch: int, busy: int, threads: str, policy: str | None) -> tuple[float, int]:
    """(median seconds of an FCPTS step, torch threads) in a fresh process beside `busy` busy loops."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    env["FCPTS_THREADS"] = "default"  # importing `tasks` leaves the thread count as configured, whatever its default
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    competitors = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0)  # let them start before the adaptive choice samples the load
        out = subprocess.run(
            [sys.executable, "-c", STEP, model, str(steps), threads, str(batch)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
    finally:
        for c in competitors:
            c.kill()
            c.wait()
    seconds, n = out.stdout.split()[-2:]
    return float(seconds), int(n)


def main(argv=None) -> int:
    p = text_parser("benchmarks.speed.thread_policy", __doc__)
    p.add_argument("--model", default="resnet20", help="a CIFAR ResNet (random weights, random 32 px images)")
    p.add_argument("--batch-size", type=int, default=64, help="as the cifar task's profiles")
    p.add_argument("--steps", type=int, default=3, help="timed FCPTS steps per process (after one warm-up step)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--busy", type=int, nargs="+", default=list(BUSY_COUNTS), help="busy competitor counts to run")
    args = p.parse_args(argv)
    if 0 not in args.busy:
        p.error("--busy must include 0: every configuration is compared with itself alone")
    configs = configurations(tuple(args.busy))
    times: dict[tuple, list[float]] = {c: [] for c in configs}
    used: dict[tuple, set[int]] = {c: set() for c in configs}
    start = time.perf_counter()
    for _ in range(args.rounds):
        for c in configs:
            seconds, n = step_seconds(args.model, args.steps, args.batch_size, *c)
            times[c].append(seconds)
            used[c].add(n)
    med = {c: statistics.median(v) for c, v in times.items()}
    cpus = usable_cpus()
    best_alone = min(s for (busy, _, _), s in med.items() if busy == 0)
    lines = [
        f"FCPTS step on {args.model}, batch {args.batch_size} at 32 px, {cpus} CPUs; median of {args.rounds} "
        f"processes x {args.steps} steps (after a warm-up step); seconds per step; competitors: busy 1-thread loops; "
        f"{len(configs) * args.rounds} processes in {time.perf_counter() - start:.0f} s",
        f"vs alone: over the same configuration alone; vs share: over the fastest alone ({best_alone:.3f} s) slowed "
        f"to the CPU share left, min(1, {cpus}/(1+busy)); at most 1.00 degrades no worse than the share",
        "busy threads  used wait policy  s/step vs alone vs share",
    ]
    for busy, threads, policy in configs:
        s = med[(busy, threads, policy)]
        counts = "/".join(str(v) for v in sorted(used[(busy, threads, policy)]))
        alone = med[(0, threads, policy)]
        lines.append(
            f"{busy:4d} {threads:8s} {counts:>4s} {policy or 'default':11s} {s:7.3f} {s / alone:7.2f}x "
            f"{vs_share(s, best_alone, cpus, busy):8.2f}"
        )
    worst = {
        (t, w): max(vs_share(med[(b, t, w)], best_alone, cpus, b) for b in args.busy)
        for t, w in product(THREADS, WAIT_POLICIES)
    }
    (t, w), score = min(worst.items(), key=lambda kv: kv[1])
    lines.append(f"winner: threads {t}, wait policy {w or 'default'} (worst vs share {score:.2f}); {to_adopt(t, w)}")
    emit(lines, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
