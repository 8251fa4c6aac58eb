"""The suite's tasks (`python -m tasks.<name>`).

OpenMP threads that wait at a barrier spin by default, taking CPU from the threads with work whenever another
process is busy on the machine: a CPU training step then slows several times more than under
OMP_WAIT_POLICY=PASSIVE, where waiting threads sleep (benchmarks/speed/thread_policy.py). The policy is read when
torch starts, so it is set here, before any task imports torch, unless the user set one.

The thread count is chosen the same way: one thread per core that was idle when the command started
(`adaptive_threads`), so a run beside busy processes does not put more threads on a core than it can get. Measured
with an FCPTS step beside 0, 1 and 2 busy processes (`python -m benchmarks thread-policy`,
results/benchmarks/thread_policy_cpu.txt), adaptive threads with PASSIVE waiting were no slower than the former
default (all cores, PASSIVE) alone and faster beside busy processes; PASSIVE stays because the count is fixed at the
start, and a competitor that starts later finds spinning threads several times slower (5.8x beside one busy process
in that output, 1.5x sleeping). On a machine that stays quiet OMP_WAIT_POLICY=ACTIVE is faster (about 1.4x there).
FCPTS_THREADS=adaptive|default overrides the thread choice per command, and an OMP_NUM_THREADS the user set (or a
later torch.set_num_threads) always wins. It costs every command 0.2 s at its start (the sample of the load).
"""

import os
import sys
import time

ADAPTIVE_THREADS = True  # the default of every command (module docstring)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which containers and `taskset` narrow), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cpu_times() -> tuple[int, int] | None:
    """(idle, total) CPU time of the whole machine since boot, in clock ticks, from /proc/stat; None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return idle, sum(fields[:8])  # guest time is already inside user time


def idle_cores(sample_s: float = 0.2) -> float | None:
    """How many cores sat idle over the next `sample_s` seconds (the load now; the load average lags a minute)."""
    before = cpu_times()
    time.sleep(sample_s)
    after = cpu_times()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)


def adaptive_threads(cpus: int, idle: float | None) -> int:
    """One thread per idle core (rounded), at least one and at most `cpus`; all `cpus` if the load is unknown."""
    if idle is None:
        return cpus
    return max(1, min(cpus, int(idle + 0.5)))


def thread_settings(environ: dict, adaptive_default: bool = ADAPTIVE_THREADS) -> dict[str, str]:
    """The variables to set before torch starts: the PASSIVE wait policy and, when adaptive threads are on
    (FCPTS_THREADS, else `adaptive_default`), OMP_NUM_THREADS; never one the user set."""
    chosen = environ.get("FCPTS_THREADS", "adaptive" if adaptive_default else "default")
    if chosen not in ("adaptive", "default"):
        print(f"error: FCPTS_THREADS={chosen!r}: use 'adaptive' or 'default' (or set OMP_NUM_THREADS)", file=sys.stderr)
        raise SystemExit(2)
    settings = {}
    if "OMP_WAIT_POLICY" not in environ:
        settings["OMP_WAIT_POLICY"] = "PASSIVE"
    if chosen == "adaptive" and "OMP_NUM_THREADS" not in environ:
        settings["OMP_NUM_THREADS"] = str(adaptive_threads(usable_cpus(), idle_cores()))
    return settings


os.environ.update(thread_settings(dict(os.environ)))
