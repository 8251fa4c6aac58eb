"""One process per cell: a lock file beside the record, so two processes (or two cluster jobs) on one results
folder never run the same cell; the second one skips it and says who holds it.

A lock whose process is gone (same host, dead pid) is stale and taken over; a lock from another host is
respected, and its message says how to remove it if that job is known to be dead. A cluster job's lock names its
job (JOB_ENV), so the launcher can release the lock of a job the scheduler says is over (timed out, killed).
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import contextmanager
from pathlib import Path

JOB_ENV = "FCPTS_JOB_ID"  # set by a cluster job (tasks.grid.cell_job) for the process that runs its cell


class CellBusy(RuntimeError):
    """Another live process holds the cell's lock."""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder(lock: Path) -> dict | None:
    try:
        return json.loads(lock.read_text())
    except (OSError, ValueError):
        return None


@contextmanager
def cell_lock(record: Path):
    """Hold `<record>.lock` while the cell runs; CellBusy when a live process holds it."""
    lock = record.with_name(record.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    if os.environ.get(JOB_ENV):
        me["job"] = os.environ[JOB_ENV]
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(lock)
            stale = holder is not None and holder.get("host") == me["host"] and not pid_alive(int(holder["pid"]))
            if not stale:
                who = f"pid {holder['pid']} on {holder['host']}" if holder else "another process"
                who += f" (job {holder['job']})" if holder and holder.get("job") else ""
                raise CellBusy(
                    f"{record.name} is being run by {who} ({lock}); remove that file only if that job is dead"
                ) from None
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def release_lock_of_job(record: Path, job_id: str) -> bool:
    """Remove the cell's lock when the job `job_id` holds it (a job the caller knows is over); True if removed."""
    lock = record.with_name(record.name + ".lock")
    holder = _holder(lock)
    if holder is None or holder.get("job") != job_id:
        return False
    lock.unlink(missing_ok=True)
    return True
