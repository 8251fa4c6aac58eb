"""Re-running a record's cell is a function of the grid: each task registers how to rebuild its grid from
a record (weights, data, seed), and `rerun_record` runs the same method, target and profile into a folder.

Used by the regression check and by deploy (which re-makes a sparse model it cannot find).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tasks.grid.profiles import Profile
from tasks.grid.records import record_path
from tasks.grid.runner import Grid, Where, run_grid

GridForRecord = Callable[..., Grid]
TASKS: dict[str, GridForRecord] = {}


def register_task(name: str) -> Callable[[GridForRecord], GridForRecord]:
    """`@register_task("cifar")` on `f(record, profile, where) -> Grid`: the grid a record came from."""

    def wrap(fn: GridForRecord) -> GridForRecord:
        TASKS[name] = fn
        return fn

    return wrap


def grid_for_record(record: dict, where: Where) -> Grid:
    if record["task"] not in TASKS:
        raise ValueError(
            f"no task {record['task']!r} is registered for re-running records; import its driver "
            f"(known: {', '.join(sorted(TASKS)) or 'none'})"
        )
    return TASKS[record["task"]](record, Profile(**record["profile"]), where)


def rerun_record(record: dict, where: Where, force: bool = True) -> tuple[dict, Path]:
    """Run the record's cell again into `where.runs_dir`; returns the new record and its path."""
    grid = grid_for_record(record, where)
    (new,) = run_grid(grid, [record["method"]], [record["target_sparsity"]], force=force)
    return new, record_path(
        grid.runs_dir,
        grid.task,
        grid.dataset,
        grid.model,
        record["method"],
        record["target_sparsity"],
        grid.profile.name,
        grid.seed,
    )
