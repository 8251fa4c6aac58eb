"""Grids on a cluster through submitit (`--launcher submitit`): each cell without a record or a live job becomes one
job running the task's command narrowed to that cell (tasks.grid.status.CellCommand); every grid is built and checked
before anything is submitted, and running the same command again submits only what is not done."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tasks.grid.help import DEFAULT_TIMEOUT_MIN, LAUNCHER_FLAGS
from tasks.grid.records import read_record
from tasks.grid.runner import Grid, cell_path, check_cells, check_same_cell
from tasks.grid.status import (
    CellCommand,
    CellState,
    cell_states,
    error_line,
    import_submitit,
    jobs_dir_for,
    read_cells,
    release_lock_of_job,
    write_cells,
)

SLURM_ONLY = {"slurm_partition": "--slurm-partition", "array_parallelism": "--array-parallelism"}
CELL_FLAGS = ("--methods", "--all-methods", "--sparsity")  # replaced by the cell's own method and target
FLAG_ALIASES = {"--models": ("--model",)}  # other spellings of a narrowing flag, dropped with it


def check_launcher_args(args: argparse.Namespace) -> None:
    """Launcher flags that do not fit together fail before any grid is built."""
    given = [
        f for f in LAUNCHER_FLAGS if f != "--launcher" and getattr(args, f[2:].replace("-", "_")) not in (None, False)
    ]
    if args.launcher == "none":
        if given:
            raise ValueError(f"{', '.join(given)} only apply with --launcher submitit")
        return
    args.cluster = args.cluster or "slurm"
    wrong = [flag for dest, flag in SLURM_ONLY.items() if getattr(args, dest) is not None and args.cluster != "slurm"]
    if wrong:
        raise ValueError(f"{', '.join(wrong)} only apply with --cluster slurm")
    if args.no_wait and args.cluster == "debug":
        raise ValueError("--cluster debug runs the jobs in this process while it waits; drop --no-wait")
    if args.cluster == "slurm" and not (shutil.which("sbatch") and shutil.which("srun")):
        raise ValueError(
            "--cluster slurm needs sbatch and srun on PATH (a SLURM login node); --cluster local runs "
            "the jobs on this machine"
        )
    import_submitit()


def cell_argv(argv: Sequence[str], method: str, target: float, selects: Sequence[str] = ()) -> list[str]:
    """One cell's command line: `argv` less the launcher's flags, plus its method and target, narrowed by `selects`."""
    drop = {*LAUNCHER_FLAGS, *CELL_FLAGS, *selects[:1], *(FLAG_ALIASES.get(selects[0], ()) if selects else ())}
    out: list[str] = []
    skip_values = False
    for token in argv:
        if _is_flag(token):
            name = token.split("=", 1)[0]
            abbreviated = sorted(flag for flag in drop if flag.startswith(name) and flag != name)
            if name not in drop and abbreviated and name.startswith("--"):
                raise ValueError(f"spell out {name} (as {' or '.join(abbreviated)}) when submitting cells")
            skip_values = name in drop and "=" not in token
            if name in drop:
                continue
        elif skip_values:
            continue
        out.append(token)
    return [*out, "--methods", method, "--sparsity", repr(target), *selects]


def _is_flag(token: str) -> bool:
    try:
        float(token)
        return False  # a negative number is a value
    except ValueError:
        return token.startswith("-")


@dataclass
class _GridJobs:
    """One grid's cells for this command: manifest entries, and the cells to submit as one job array."""

    grid: dict  # what names the grid in its manifest and its jobs folder
    folder: Path
    selects: tuple[str, ...]
    entries: dict[str, dict] = field(default_factory=dict)
    to_submit: list[tuple[dict, CellCommand, str | None]] = field(default_factory=list)  # entry, job, stale job


def launch(
    args: argparse.Namespace,
    plans: Iterable[tuple],
    argv: Sequence[str],
    table: Callable[[list[dict]], str],
    log: Callable[[str], None] = print,
) -> int:
    """Submit every cell of the planned grids that has no record and no live job; wait and report (see above)."""
    submitit = import_submitit()
    jobs_dir = jobs_dir_for(args.results_dir, args.jobs_dir)
    if not args.prog.startswith("python -m "):
        raise ValueError(f"a cluster job runs `python -m <task>`; this parser's prog is {args.prog!r}")
    cell_argv(argv, "-", 0.0)  # an abbreviated flag fails here, before any grid is built
    grids: list[_GridJobs] = []
    records: list[dict] = []
    for grid, methods, targets, selects, _ in plans:  # each grid is built, checked and dropped before the next
        identity = {key: getattr(grid, key) for key in ("task", "dataset", "model")}
        identity |= {"profile": grid.profile.name, "seed": grid.seed, "results_dir": str(grid.runs_dir.resolve())}
        folder = jobs_dir / grid.task / grid.dataset / grid.model / f"{grid.profile.name}-seed{grid.seed}"
        g = _GridJobs(identity, folder, tuple(selects))
        if grids and not (g.selects and grids[0].selects):
            raise ValueError(f"{args.prog} planned several grids without saying how to narrow its command to one")
        _collect(g, grid, list(methods), list(targets), argv, args, records, log)
        grids.append(g)
    jobs = [job for g in grids for job in _submit(submitit, g, args, log)]
    if not jobs:
        log("nothing to submit: every cell has a record or a live job")
        print(table(records))
        return 0
    if args.no_wait:
        log(f"submitted {len(jobs)} job(s); follow them with: python -m tasks.grid status --jobs-dir {jobs_dir}")
        return 0
    return _wait(submitit, jobs, args.cluster, records, table, jobs_dir, log)


def _collect(g: _GridJobs, grid: Grid, methods, targets, argv, args, records, log) -> None:
    """Check the grid's cells and sort them: recorded (skipped), running (left to their job), to submit."""
    check_cells(grid, methods, targets)
    known = read_cells(g.folder, discard_damaged=args.force)
    previous = [e for e in known.values() if e.get("job_id")]
    states = dict(zip([e["record"] for e in previous], cell_states(previous, g.folder)))
    for method in methods:
        for target in targets:
            path = cell_path(grid, method, target)
            cell = cell_argv(argv, method, target, g.selects)
            job = CellCommand(args.prog.removeprefix("python -m "), tuple(cell), os.getcwd(), str(path.resolve()))
            new = {"record": job.record, "cell": str(path.relative_to(grid.runs_dir)), "method": method}
            new |= {"target": target, "cluster": None, "job_id": None, "submitted": None}
            entry = g.entries[job.record] = {**known.get(job.record, new), "command": job.command}
            done = None if args.force else read_record(path)
            if done is not None:
                check_same_cell(done, path, target, grid)
                log(f"[skip] {entry['cell']} exists (use --force to redo)")
                records.append(done)
                continue
            state = states.get(job.record)
            if state is not None and state.state == "running":
                log(f"[running] {entry['cell']} is job {entry['job_id']} ({state.detail}); not submitted again")
                continue
            g.to_submit.append((entry, job, entry.get("job_id") if state is not None else None))


def _submit(submitit, g: _GridJobs, args: argparse.Namespace, log) -> list[tuple[Any, dict, Path]]:
    """Submit one grid's cells as one job array, with the command's resources, and record them in its manifest."""
    out = []
    if g.to_submit:
        try:
            executor = submitit.AutoExecutor(folder=g.folder, cluster=args.cluster)
        except RuntimeError as e:  # e.g. no srun on this machine
            raise ValueError(f"--cluster {args.cluster}: {e} (--cluster local runs the jobs on this machine)") from None
        wanted = {key: getattr(args, key) for key in ("gpus_per_node", "cpus_per_task", "mem_gb", "slurm_partition")}
        wanted["slurm_array_parallelism"] = args.array_parallelism
        executor.update_parameters(
            name=f"{g.grid['task']}-{g.grid['model']}",
            timeout_min=args.timeout_min or DEFAULT_TIMEOUT_MIN,
            nodes=1,
            tasks_per_node=1,
            **{k: v for k, v in wanted.items() if v is not None},
        )
        for entry, _, stale in g.to_submit:
            if stale and release_lock_of_job(Path(entry["record"]), stale):
                log(f"[unlock] {entry['cell']}: removed the lock left by job {stale}, which is over")
        with executor.batch():
            jobs = [executor.submit(job) for _, job, _ in g.to_submit]
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        for (entry, _, _), job in zip(g.to_submit, jobs):
            g.entries[entry["record"]] = {**entry, "cluster": args.cluster, "job_id": str(job.job_id), "submitted": now}
            out.append((job, g.entries[entry["record"]], g.folder))
            log(f"[submitted] {entry['cell']} as job {job.job_id}")
    write_cells(g.folder, g.grid, g.entries)
    return out


def _wait(submitit, jobs, cluster, records, table, jobs_dir, log) -> int:
    """Report each cell as its job ends; non-zero when any cell has no record."""
    by_job = {id(job): (entry, folder) for job, entry, folder in jobs}
    failed = 0
    try:
        for job, error in _finished(submitit, [job for job, _, _ in jobs], cluster):
            entry, folder = by_job[id(job)]
            state = cell_states([entry], folder)[0]
            if cluster == "debug" and state.state != "done":  # its error is here, not in a result pickle
                state = CellState("failed", error_line(str(error)), state.log)
            if state.state == "done":
                records.append(read_record(Path(entry["record"])))
                log(f"[done] {entry['cell']} (job {entry['job_id']})")
            else:
                failed += 1
                log(f"[{state.state}] {entry['cell']} (job {entry['job_id']}): {state.detail}")
                if state.log:
                    log(f"    log: {state.log}")
    except KeyboardInterrupt:
        log(f"stopped waiting; the jobs go on: python -m tasks.grid status --jobs-dir {jobs_dir}")
        return 130
    print()
    print(table([r for r in records if r is not None]))
    if failed:
        log(
            f"{failed} of {len(jobs)} cell(s) failed; run the same command again to resubmit them (done cells are "
            f"skipped); python -m tasks.grid status --jobs-dir {shlex.quote(str(jobs_dir))}"
        )
        return 1
    return 0


def _finished(submitit, jobs: list, cluster: str):
    """(job, the error it raised here or None) as each job ends; the debug executor runs each job right here."""
    if cluster != "debug":
        poll = 30.0 if cluster == "slurm" else 1.0
        yield from ((job, None) for job in submitit.helpers.as_completed(jobs, poll_frequency=poll))
        return
    for job in jobs:
        try:
            job.result()
            yield job, None
        except Exception as e:  # the cell's failure, already shown by the debug executor
            yield job, e
