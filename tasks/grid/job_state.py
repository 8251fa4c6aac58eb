"""Where a submitted cell stands: its record first, then its job's result pickle, then the scheduler.
States: done, running (queued or running), failed (over, no record), missing (no record and no job)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tasks.grid.help import INSTALL_HINT
from tasks.grid.lock import pid_alive

# Slurm states of a job that is not over yet (submitit treats UNKNOWN the same: sacct may not know a new job).
SLURM_ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "SUSPENDED", "READY", "RESIZING"}
SLURM_ACTIVE |= {"PREEMPTED", "UNKNOWN"}
CELL_ERROR = "tasks.grid.cell_job.CellFailed: "


@dataclass(frozen=True)
class CellState:
    state: str  # done | running | failed | missing
    detail: str = ""
    log: str | None = None  # the job's stderr log


def cell_states(entries: list[dict], folder: Path) -> list[CellState]:
    """The state of each cell entry of one grid's manifest (one scheduler query for all of them)."""
    jobs = {e["record"]: _job(e["cluster"], folder, e["job_id"]) for e in entries if e.get("job_id")}
    return [_state(e, jobs.get(e["record"])) for e in entries]


def import_submitit():
    """submitit, imported only when cells go to a cluster (an optional dependency)."""
    try:
        import submitit
    except ImportError:
        raise ValueError(f"cluster jobs need submitit: {INSTALL_HINT}") from None
    return submitit


def _job(cluster: str, folder: Path, job_id: str):
    submitit = import_submitit()
    kind = {"slurm": submitit.SlurmJob, "local": submitit.LocalJob}.get(cluster, submitit.Job)
    return kind(folder=folder, job_id=job_id)  # a slurm job registers with the watcher: one sacct for all


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
        return CellState("running", state, log) if state in SLURM_ACTIVE else CellState("failed", state, log)
    if entry["cluster"] == "local":
        if pid_alive(int(job.job_id)):
            return CellState("running", "RUNNING", log)
        return CellState("failed", "the job's process ended without a result (killed or timed out)", log)
    return CellState("failed", f"no record, and the {entry['cluster']} executor keeps no job state", log)


def error_line(traceback_text: str) -> str:
    """The line of a job's traceback that says what went wrong."""
    lines = [line for line in traceback_text.splitlines() if line.strip()]
    last = lines[-1] if lines else "unknown error"
    return last.removeprefix(CELL_ERROR)
