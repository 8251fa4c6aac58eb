"""How long a grid's cells will take, from the records of comparable cells (`--dry-run`).

A cell's estimate is the median time (method + evaluation) of the records of the same task, dataset, model,
method and profile at the same target; else at any target; else, for an ImageNet cell at the paper's budget, the
method time the scale benchmark projected for that model and method on a GPU (its committed full-mode output,
`results/benchmarks/scale_<device>.json`); else it is unknown. Times are those of the machines the records or
the projection ran on (each names its device), so an estimate is a guide, not a promise.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tasks.grid.paths import RESULTS_DIR, RUNS_DIR
from tasks.grid.records import all_records


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # None: no comparable record
    basis: str  # what it rests on, said beside it


def cell_seconds(record: dict) -> float:
    return float(record.get("wall_s") or 0.0) + float(record.get("eval_s") or 0.0)


def comparable_records(runs_dirs: Iterable[Path]) -> list[dict]:
    """The records of every folder given (each once), the committed ones included."""
    seen: set[Path] = set()
    out: list[dict] = []
    for folder in [RUNS_DIR, *runs_dirs]:
        folder = Path(folder).resolve()
        if folder not in seen and folder.is_dir():
            seen.add(folder)
            out += [r for r in all_records(folder) if r.get("wall_s")]
    return out


PROJECTED_PROFILE = ("imagenet", "paper")  # the task and profile whose budget the scale benchmark projects to
Projections = dict[tuple[str, str], Estimate]


def scale_projections(folder: Path = RESULTS_DIR / "benchmarks") -> Projections:
    """(model, method) -> the scale benchmark's projected method time of one cell at the paper's ImageNet budget,
    from its full-mode outputs on a GPU; a projection that hit a limit (`clamped`) is no estimate."""
    out: Projections = {}
    for path in sorted(folder.glob("scale_*.json")):
        try:
            scale = json.loads(path.read_text())
        except ValueError:
            continue  # not readable: no projection from it (the benchmark's own tests read it)
        if (
            not isinstance(scale, dict)
            or scale.get("mode") != "full"
            or not str(scale.get("device")).startswith("cuda")
        ):
            continue
        for cell in scale.get("cells", []):
            projection = cell.get("projection") or {}
            if cell.get("status") == "ok" and projection.get("projected_s") and not projection.get("clamped"):
                basis = (
                    f"projected by the scale benchmark on {scale.get('device_description')} ({path.name}), method only"
                )
                out[(cell["model"], cell["method"])] = Estimate(float(projection["projected_s"]), basis)
    return out


def estimate(
    records: list[dict],
    task: str,
    dataset: str,
    model: str,
    method: str,
    profile: str,
    target: float,
    projections: Projections | None = None,
):
    """The estimate of one cell from `records`, else from `projections` (see the module docstring)."""
    same = [
        r
        for r in records
        if (r["task"], r["dataset"], r["model"], r["method"], r["profile"]["name"])
        == (task, dataset, model, method, profile)
    ]
    at_target = [r for r in same if round(r["target_sparsity"], 4) == round(target, 4)]
    for chosen, where in ((at_target, "at this target"), (same, "at other targets")):
        if chosen:
            seconds = statistics.median(cell_seconds(r) for r in chosen)
            return Estimate(seconds, f"median of {len(chosen)} record(s) {where}")
    projected = (projections or {}).get((model, method)) if (task, profile) == PROJECTED_PROFILE else None
    return projected or Estimate(None, "unknown: no record of this model, method and profile")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
