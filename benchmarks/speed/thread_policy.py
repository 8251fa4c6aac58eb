"""Benchmark: a CPU training step with torch's default threads, alone and beside one busy process, under
OpenMP's default wait policy and under OMP_WAIT_POLICY=PASSIVE.

While an OpenMP thread waits at a barrier it spins by default; on a machine where another process is busy,
the spinning threads take CPU time from the threads that still have work, and a step slows by more than
the share of the CPU it lost. PASSIVE makes waiting threads sleep. The policy is read once, when the
OpenMP runtime starts (at torch's import), so each configuration runs in a process of its own, started with
OMP_NUM_THREADS unset (torch's default: one thread per core). The competitor is a Python loop that keeps
one core busy. Configurations alternate, round after round; the medians are compared.

    python -m benchmarks.speed.thread_policy --output results/benchmarks/thread_policy_cpu.txt
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

from benchmarks.report import emit, text_parser

STEP = """
import statistics, sys, time
import torch, torchvision
torch.manual_seed(0)
model = torchvision.models.resnet18()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 3, 64, 64), torch.randint(0, 1000, (32,))
times = []
for i in range(int(sys.argv[1]) + 2):  # two warm-up steps
    tic = time.perf_counter()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    times.append(time.perf_counter() - tic)
print(statistics.median(times[2:]), torch.get_num_threads())
"""

BUSY = "while True: pass"


def step_seconds(policy: str | None, contended: bool, steps: int) -> tuple[float, int]:
    """Median seconds of a training step in a fresh process with that wait policy, beside a busy loop or not."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    busy = subprocess.Popen([sys.executable, "-c", BUSY]) if contended else None
    try:
        out = subprocess.run(
            [sys.executable, "-c", STEP, str(steps)], env=env, capture_output=True, text=True, check=True
        )
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    seconds, threads = out.stdout.split()
    return float(seconds), int(threads)


def main(argv=None) -> int:
    p = text_parser("benchmarks.speed.thread_policy", __doc__)
    p.add_argument("--steps", type=int, default=5, help="timed steps per process (after two warm-up steps)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    configs = [(policy, contended) for policy in (None, "PASSIVE") for contended in (False, True)]
    times: dict[tuple, list[float]] = {c: [] for c in configs}
    threads = 0
    for _ in range(args.rounds):
        for c in configs:
            seconds, threads = step_seconds(*c, args.steps)
            times[c].append(seconds)
    med = {c: statistics.median(v) for c, v in times.items()}
    lines = [
        f"ResNet-18 training step, batch 32 at 64 px, torch's default {threads} threads, {os.cpu_count()} CPUs; "
        f"median of {args.rounds} processes x {args.steps} steps; seconds per step",
        "the machine is shared: other processes may have run too (see the load average below)",
        f"{'wait policy':12s} {'alone':>7s} {'beside a busy process':>22s} {'slowdown':>9s}",
    ]
    for policy in (None, "PASSIVE"):
        alone, busy = med[(policy, False)], med[(policy, True)]
        lines.append(f"{policy or 'default':12s} {alone:7.3f} {busy:22.3f} {busy / alone:8.2f}x")
    lines.append(
        f"PASSIVE / default: alone {med[('PASSIVE', False)] / med[(None, False)]:.2f}x, "
        f"beside a busy process {med[('PASSIVE', True)] / med[(None, True)]:.2f}x"
    )
    emit(lines, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
