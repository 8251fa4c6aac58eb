"""Re-running a record's cell is a function of the grid: each task registers how to rebuild its grid from
a record (weights, data, seed), and `rerun_record` runs the same method, target and profile into a folder,
with the method's options pinned to those the record ran with (a default changed since does not leak in).

Used by the regression check and by deploy (which re-makes a sparse model it cannot find).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from fcpts.methods import get_method
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


# Options a re-run sets itself: where and how a run reports, its seed, and a layer filter (recorded by name, the
# grid supplies the function).
NOT_PINNED = {
    "checkpoint",
    "checkpoint_every_s",
    "checkpoint_every_steps",
    "progress",
    "device",
    "log_every",
    "seed",
    "filter_fn",
}


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def pinned_options(record: dict) -> dict[str, Any]:
    """The record's method options that today's defaults would not give: a default changed since the record
    was made. An option the record lacks predates it and ran as the method's `DEFAULTS_BEFORE` says."""
    method = get_method(record["method"])
    today = _json(method.make_options().to_dict())
    made_with = {**method.options.DEFAULTS_BEFORE, **record["method_options"]}
    return {k: v for k, v in made_with.items() if k in today and k not in NOT_PINNED and _json(v) != today[k]}


def record_profile(record: dict) -> Profile:
    """The record's profile with its method's options pinned to what the record ran with."""
    profile = Profile(**record["profile"])
    pinned = pinned_options(record)
    if not pinned:
        return profile
    method = record["method"]
    entry = profile.methods.get(method, {})
    options = {**pinned, **entry.get("options", {})}
    return replace(profile, methods={**profile.methods, method: {**entry, "options": options}})


def grid_for_record(record: dict, where: Where) -> Grid:
    if record["task"] not in TASKS:
        raise ValueError(
            f"no task {record['task']!r} is registered for re-running records; import its driver "
            f"(known: {', '.join(sorted(TASKS)) or 'none'})"
        )
    return TASKS[record["task"]](record, record_profile(record), where)


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
