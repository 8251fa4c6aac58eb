"""`python -m tasks.grid status`: where each submitted cell stands, from the manifest the launcher writes per grid
(`<jobs-dir>/<task>/<dataset>/<model>/<profile>-seed<seed>/submission.json`: each cell's record, command, cluster and
latest job), the records, and submitit's job folders (one scheduler query per grid).
States: done, running (queued or running), failed (over, no record), missing (no record and no job).
A cell's job is a `CellCommand`: the task's command narrowed to that cell, run in a child process, so the record, lock,
resume and provenance are a local run's. Standard library only: `status --help` and the job process stay light."""

from __future__ import annotations

import argparse
import codecs
import fcntl
import json
import os
import shlex
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tasks.grid.help import INSTALL_HINT
from tasks.grid.paths import RUNS_DIR

MANIFEST = "submission.json"
STATES = ("done", "running", "failed", "missing")
# Slurm states of a job that is not over yet (submitit treats UNKNOWN the same: sacct may not know a new job).
SLURM_ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "SUSPENDED", "READY", "RESIZING"}
SLURM_ACTIVE |= {"PREEMPTED", "UNKNOWN"}
JOB_ENV = "FCPTS_JOB_ID"  # set by a cluster job (CellCommand) for the process that runs its cell


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
    """Hold `<record>.lock` (flock-held) while the cell runs, so two processes or cluster jobs never run one cell;
    CellBusy when a live process holds it. A dead holder's lock is taken over atomically, another host's respected,
    a finished job's released by the launcher (`release_lock_of_job`; JOB_ENV names the job)."""
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


class CellFailed(RuntimeError):
    """The cell's command failed or left no record; the message ends with its last line of stderr."""


CELL_ERROR = f"{CellFailed.__module__}.{CellFailed.__qualname__}: "  # how submitit's error pickle starts the message


@dataclass(frozen=True)
class CellCommand:
    """Picklable callable that submitit runs as a job: `python -m <module> <argv>` in `cwd`."""

    module: str  # tasks.cifar
    argv: tuple[str, ...]
    cwd: str
    record: str  # the record this cell writes (absolute)

    @property
    def command(self) -> str:
        return shlex.join(["python", "-m", self.module, *self.argv])

    def __call__(self) -> str:
        import submitit

        env = {**os.environ, JOB_ENV: str(submitit.JobEnvironment().job_id)}
        print(f"cell: {self.command}\n  in {self.cwd}", flush=True)
        sys.stderr.flush()
        child = subprocess.Popen(
            [sys.executable, "-m", self.module, *self.argv], cwd=self.cwd, env=env, stderr=subprocess.PIPE
        )
        last_line = _copy_stderr(child)
        status = child.wait()
        if status != 0:
            raise CellFailed(f"exited with status {status}: {last_line}")
        if not Path(self.record).is_file():
            raise CellFailed(f"exited without writing {self.record}: {last_line}")
        return self.record


def _copy_stderr(child: subprocess.Popen) -> str:
    """Stream the child's stderr into this job's log as it comes; return its last non-empty line."""
    assert child.stderr is not None
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace")
    tail = ""
    while chunk := child.stderr.read1(8192):  # type: ignore[attr-defined]  # a BufferedReader: Popen without text
        text = decode.decode(chunk)
        sys.stderr.write(text)
        sys.stderr.flush()
        tail = (tail + text)[-4096:]
    lines = [line.strip() for line in tail.replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output on stderr)"


def jobs_dir_for(results_dir: str | Path, jobs_dir: str | Path | None = None) -> Path:
    """The jobs folder: `--jobs-dir`, else the results folder's hidden `.jobs/` (record readers skip it)."""
    return Path(jobs_dir) if jobs_dir else Path(results_dir) / ".jobs"


def read_cells(folder: Path, discard_damaged: bool = False) -> dict[str, dict]:
    """Record path -> its cell entry; a damaged manifest is an error, or deleted with `discard_damaged`."""
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    try:
        return {cell["record"]: cell for cell in json.loads(path.read_text())["cells"]}
    except (ValueError, KeyError, TypeError) as e:
        if discard_damaged:
            path.unlink()
            return {}
        raise ValueError(
            f"the job manifest {path} is damaged ({type(e).__name__}: {e}); run the command again with --force to "
            "rebuild it (cells with a record are redone too), or delete it (jobs still running are then not "
            "known to the launcher)"
        ) from None


def write_cells(folder: Path, grid: dict, cells: dict[str, dict]) -> Path:
    """Merge `cells` into the folder's manifest (a cell submitted again keeps only its latest job)."""
    from fcpts.core.io import write_json_atomic

    merged = {**read_cells(folder), **cells}
    return write_json_atomic(
        folder / MANIFEST, {"grid": grid, "cells": sorted(merged.values(), key=lambda c: c["record"])}
    )


@dataclass(frozen=True)
class CellState:
    state: str  # done | running | failed | missing
    detail: str = ""
    log: str | None = None  # the job's stderr log


def import_submitit():
    """submitit, imported only when cells go to a cluster (an optional dependency)."""
    try:
        import submitit
    except ImportError:
        raise ValueError(f"cluster jobs need submitit: {INSTALL_HINT}") from None
    return submitit


def cell_states(entries: list[dict], folder: Path) -> list[CellState]:
    """The state of each cell entry of one grid's manifest (one scheduler query for all of them)."""
    submitted = [e for e in entries if e.get("job_id")]
    jobs = {}
    if submitted:  # a slurm job registers with the watcher: one sacct for all
        submitit = import_submitit()
        kinds = {"slurm": submitit.SlurmJob, "local": submitit.LocalJob}
        jobs = {
            e["record"]: kinds.get(e["cluster"], submitit.Job)(folder=folder, job_id=e["job_id"]) for e in submitted
        }
    return [_state(e, jobs.get(e["record"])) for e in entries]


def _state(entry: dict, job) -> CellState:
    from tasks.grid.records import read_record  # imports torch: here, so `status --help` needs none

    if read_record(Path(entry["record"])) is not None:
        return CellState("done")
    if job is None:
        return CellState("missing", "not submitted")
    from submitit.core.utils import pickle_load

    log = str(job.paths.stderr)
    if job.paths.result_pickle.exists():
        outcome, value = pickle_load(job.paths.result_pickle)
        if outcome == "error":
            return CellState("failed", error_line(str(value)), log)
        return CellState("missing", f"record removed after job {job.job_id} wrote it")
    if entry["cluster"] == "slurm":
        state = job.state.split()[0]  # "CANCELLED by 123" -> CANCELLED
        return CellState("running" if state in SLURM_ACTIVE else "failed", state, log)
    if entry["cluster"] == "local":
        if pid_alive(int(job.job_id)):
            return CellState("running", "RUNNING", log)
        return CellState("failed", "the job's process ended without a result (killed or timed out)", log)
    return CellState("failed", f"no record, and the {entry['cluster']} executor keeps no job state", log)


def error_line(traceback_text: str) -> str:
    """The line of a job's traceback that says what went wrong."""
    lines = [line for line in traceback_text.splitlines() if line.strip()]
    return (lines[-1] if lines else "unknown error").removeprefix(CELL_ERROR)


def status_rows(jobs_dir: Path) -> list[dict]:
    """One row per cell of every grid submitted from `jobs_dir`: cell, state, job, detail, log."""
    rows = []
    for manifest in sorted(jobs_dir.rglob(MANIFEST)):
        cells = list(read_cells(manifest.parent).values())
        for cell, state in zip(cells, cell_states(cells, manifest.parent)):
            rows.append({"cell": cell["cell"], "job": cell.get("job_id") or "-", "state": state})
    return rows


def format_status(rows: list[dict]) -> str:
    width = max([len("cell")] + [len(r["cell"]) for r in rows])
    lines = [f"{'state':8s} {'cell':{width}s} {'job':>12s}  detail", "-" * (width + 32)]
    for r in rows:
        state = r["state"]
        lines.append(f"{state.state:8s} {r['cell']:{width}s} {r['job']:>12s}  {state.detail}")
        if state.state == "failed" and state.log:
            lines.append(f"{'':8s} log: {state.log}")
    counts = Counter(r["state"].state for r in rows)
    lines.append(f"{len(rows)} cells: " + ", ".join(f"{counts[s]} {s}" for s in STATES))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tasks.grid status", description=__doc__)
    p.add_argument("--results-dir", default=str(RUNS_DIR), help="the grid's --results-dir (default: results/runs)")
    p.add_argument("--jobs-dir", help="the grid's --jobs-dir (default: <results-dir>/.jobs)")
    p.add_argument("--state", choices=STATES, action="append", help="show only cells in this state (repeatable)")
    args = p.parse_args(argv)
    jobs_dir = jobs_dir_for(args.results_dir, args.jobs_dir)
    try:
        rows = status_rows(jobs_dir)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"no submissions under {jobs_dir} (the launcher writes <grid>/{MANIFEST} there)")
        return 1
    print(format_status([r for r in rows if not args.state or r["state"].state in args.state]))
    return 0
