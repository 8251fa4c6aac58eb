"""What the cluster launcher submitted: one manifest per grid
(`<jobs-dir>/<task>/<dataset>/<model>/<profile>-seed<seed>/submission.json`) naming each cell's record, command,
cluster and latest job, read by `python -m tasks.grid status` and by a re-run of the same command."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `python -m tasks.grid status` reads manifests without torch
    from tasks.grid.runner import Grid

MANIFEST = "submission.json"


def jobs_dir_for(results_dir: str | Path, jobs_dir: str | Path | None = None) -> Path:
    """The jobs folder: `--jobs-dir`, else the results folder's hidden `.jobs/` (record readers skip it)."""
    return Path(jobs_dir) if jobs_dir else Path(results_dir) / ".jobs"


def grid_identity(grid: Grid) -> dict:
    """What names a grid in its manifest and its jobs folder (the grid itself holds data and models)."""
    return {
        "task": grid.task,
        "dataset": grid.dataset,
        "model": grid.model,
        "profile": grid.profile.name,
        "seed": grid.seed,
        "results_dir": str(Path(grid.runs_dir).resolve()),
    }


def grid_folder(jobs_dir: Path, grid: dict) -> Path:
    return jobs_dir / grid["task"] / grid["dataset"] / grid["model"] / f"{grid['profile']}-seed{grid['seed']}"


class DamagedManifest(ValueError):
    """A submission.json that cannot be read; the message names the file and the fix."""


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
        raise DamagedManifest(
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


def cell_entry(record: Path, runs_dir: Path, method: str, target: float) -> dict:
    """A cell not (yet) submitted: the launcher adds its command, `submitted` its job."""
    return {
        "record": str(record.resolve()),
        "cell": str(record.relative_to(runs_dir)),
        "method": method,
        "target": target,
        "command": None,
        "cluster": None,
        "job_id": None,
        "submitted": None,
    }


def submitted(entry: dict, cluster: str, job_id: str) -> dict:
    return {
        **entry,
        "cluster": cluster,
        "job_id": job_id,
        "submitted": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def manifests(jobs_dir: Path) -> list[Path]:
    """Every grid's manifest under a jobs folder."""
    return sorted(jobs_dir.rglob(MANIFEST))
