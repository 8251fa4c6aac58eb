"""One process per cell: a flock-held lock file beside the record, so two processes (or cluster jobs) never run the
same cell; a dead holder's lock is taken over atomically, another host's respected, a finished job's released by
the launcher (JOB_ENV names the job)."""

from __future__ import annotations

import fcntl
import json
import os
import socket
from contextlib import contextmanager
from pathlib import Path

JOB_ENV = "FCPTS_JOB_ID"  # set by a cluster job (tasks.grid.status.CellCommand) for the process that runs its cell


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


def _holder(lock: Path, text: str | None = None) -> dict | None:
    """Who the lock file says holds it (`text`: its content, already read), or None when it says nothing readable."""
    try:
        holder = json.loads(lock.read_text() if text is None else text)
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) and {"pid", "host"} <= set(holder) else None


def _busy(record: Path, lock: Path, holder: dict | None) -> CellBusy:
    who = f"pid {holder['pid']} on {holder['host']}" if holder else "another process"
    who += f" (job {holder['job']})" if holder and holder.get("job") else ""
    return CellBusy(f"{record.name} is being run by {who} ({lock}); remove that file only if that job is dead")


def _open_locked(lock: Path) -> int | None:
    """A descriptor holding the lock file's exclusive flock, or None when a live process of this host holds it (a dead
    one's flock is gone: taking its lock over is one atomic step); a file unlinked meanwhile is opened again."""
    while True:
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


@contextmanager
def cell_lock(record: Path):
    """Hold `<record>.lock` while the cell runs; CellBusy when a live process holds it."""
    lock = record.with_name(record.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    if os.environ.get(JOB_ENV):
        me["job"] = os.environ[JOB_ENV]
    fd = _open_locked(lock)
    if fd is None:
        raise _busy(record, lock, _holder(lock))
    # What the file says still counts where flock cannot see: another host's job on a shared file system.
    try:
        text = os.read(fd, 1 << 16).decode(errors="replace")
        holder = _holder(lock, text)
        stale = holder is not None and holder["host"] == me["host"] and not pid_alive(int(holder["pid"]))
        if text and not stale:
            raise _busy(record, lock, holder)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    try:
        yield
    finally:
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:  # not released by the launcher and taken by another
                lock.unlink()
        except FileNotFoundError:
            pass
        os.close(fd)


def release_lock_of_job(record: Path, job_id: str) -> bool:
    """Remove the cell's lock when the job `job_id` holds it (a job the caller knows is over); True if removed."""
    lock = record.with_name(record.name + ".lock")
    holder = _holder(lock)
    if holder is None or holder.get("job") != job_id:
        return False
    lock.unlink(missing_ok=True)
    return True
