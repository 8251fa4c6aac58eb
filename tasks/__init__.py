"""The suite's tasks (`python -m tasks.<name>`).

Set here, before any task imports torch: the OpenMP wait policy PASSIVE (waiting threads sleep, so a step beside
another busy process does not slow several times) and one thread per core idle when the command starts
(docs/notebook/benchmarks.md). FCPTS_THREADS=adaptive|default overrides the thread choice per command; an
OMP_NUM_THREADS or OMP_WAIT_POLICY the user set always wins.
"""

import os
import sys
import time


def idle_cores(sample_s: float = 0.2) -> float | None:
    """How many cores sat idle over the next `sample_s` seconds, from /proc/stat (the load average lags a minute);
    None where it cannot be read."""

    def cpu_times() -> tuple[int, int]:  # (idle + iowait, total) since boot; guest time is inside user time
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return fields[3] + (fields[4] if len(fields) > 4 else 0), sum(fields[:8])

    try:
        idle_before, total_before = cpu_times()
        time.sleep(sample_s)
        idle_after, total_after = cpu_times()
    except (OSError, ValueError, IndexError):
        return None
    if total_after <= total_before:
        return None
    return (idle_after - idle_before) / (total_after - total_before) * (os.cpu_count() or 1)


def thread_settings(environ: dict) -> dict[str, str]:
    """The variables to set before torch starts: the PASSIVE wait policy and, unless FCPTS_THREADS=default,
    OMP_NUM_THREADS (one per idle core, at least one, at most the CPUs this process may use); never one the user set."""
    chosen = environ.get("FCPTS_THREADS", "adaptive")
    if chosen not in ("adaptive", "default"):
        print(f"error: FCPTS_THREADS={chosen!r}: use 'adaptive' or 'default' (or set OMP_NUM_THREADS)", file=sys.stderr)
        raise SystemExit(2)
    settings = {}
    if "OMP_WAIT_POLICY" not in environ:
        settings["OMP_WAIT_POLICY"] = "PASSIVE"
    if chosen == "adaptive" and "OMP_NUM_THREADS" not in environ:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        idle = idle_cores()
        settings["OMP_NUM_THREADS"] = str(cpus if idle is None else max(1, min(cpus, int(idle + 0.5))))
    return settings


os.environ.update(thread_settings(dict(os.environ)))
