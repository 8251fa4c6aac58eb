"""The suite's tasks (`python -m tasks.<name>`).

Set here, before any task imports torch: the OpenMP wait policy PASSIVE (waiting threads sleep, so a step beside
another busy process does not slow several times) and one thread per core idle when the command starts
(`adaptive_threads`). Chosen by measurement: docs/notebook/benchmarks.md (results/benchmarks/thread_policy_cpu.txt).
FCPTS_THREADS=adaptive|default overrides the thread choice per command; an OMP_NUM_THREADS or OMP_WAIT_POLICY the
user set always wins. It costs every command 0.2 s at its start (the sample of the load).
"""

import os
import sys
import time


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which containers and `taskset` narrow), else all."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


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


def thread_settings(environ: dict) -> dict[str, str]:
    """The variables to set before torch starts: the PASSIVE wait policy and, unless FCPTS_THREADS=default,
    OMP_NUM_THREADS; never one the user set."""
    chosen = environ.get("FCPTS_THREADS", "adaptive")
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
