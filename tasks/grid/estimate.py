"""How long a grid's cells will take (`--dry-run`): the median of records of the same cell (same target first),
else the scale benchmark's GPU projection (ImageNet, paper budget), else one record of the same method scaled by
parameters x images x iterations, else unknown; plus, once per grid, its start and dense evaluation. Times are
those of the machines the records ran on: a guide, not a promise."""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from fcpts.methods import get_method
from tasks.grid.paths import RESULTS_DIR, RUNS_DIR
from tasks.grid.records import PROFILE_PREFERENCE, all_records, read_record
from tasks.grid.runner import cell_budget, cell_path, check_cells

# A grid's start before its first cell (imports, data, weights), measured for CIFAR-10 ResNet-56 only.
START_S = {"cifar": 20.0}


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # None: no comparable record
    basis: str  # what it rests on, said beside it


PROJECTED_PROFILE = ("imagenet", "paper")  # the task and profile whose budget the scale benchmark projects to
Projections = dict[tuple[str, str], Estimate]


def scale_projections(folder: Path = RESULTS_DIR / "benchmarks") -> Projections:
    """(model, method) -> the scale benchmark's GPU projection of one cell at the paper's ImageNet budget."""
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
        basis = f"projected by the scale benchmark on {scale.get('device_description')} ({path.name}), method only"
        for cell in scale.get("cells", []):
            projection = cell.get("projection") or {}
            if cell.get("status") == "ok" and projection.get("projected_s") and not projection.get("clamped"):
                out[(cell["model"], cell["method"])] = Estimate(float(projection["projected_s"]), basis)
    return out


def work(method: str, budget: dict) -> float:
    """What a cell's method time scales with besides its model's size: steps x batch for a training-loop method, images
    x per-layer iterations for POT, images for a one-shot method."""
    if get_method(method).trains:
        return float(budget["iterations"]) * float(budget["batch_size"])
    return float(budget["n_images"]) * float((budget.get("options") or {}).get("iterations") or 1)


def scaled(records: list[dict], task, dataset, model, method, profile, target, budget) -> Estimate | None:
    """The closest record of the same method, its time scaled to this cell's work; None when none compares."""
    weights = {(r["task"], r["model"]): sum(row["numel"] for row in r["per_layer"]) for r in records}
    mine = weights.get((task, model))
    same_method = [r for r in records if (r["task"], r["method"]) == (task, method)]
    candidates = [r for r in same_method if r["model"] == model or (mine and weights[(task, r["model"])])]
    if not candidates:
        return None

    def closeness(r: dict) -> tuple:
        name = r["profile"]["name"]
        same = (r["model"] == model, r["dataset"] == dataset, name == profile, name in PROFILE_PREFERENCE)
        return (*(not s for s in same), abs(r["target_sparsity"] - target), r.get("_path", ""))

    chosen = min(candidates, key=closeness)
    factor = (mine or 1) / (weights[(task, chosen["model"])] or 1) if chosen["model"] != model else 1.0
    chosen_work = work(method, {**chosen["budget"], "n_images": chosen["calibration"]["n_images"]})
    factor *= work(method, budget) / max(chosen_work, 1.0)
    return Estimate(
        float(chosen["wall_s"]) * factor + float(chosen.get("eval_s") or 0.0),
        f"scaled from the record of {chosen['dataset']} {chosen['model']} {chosen['target_sparsity']:.0%}, profile "
        f"{chosen['profile']['name']} ({chosen.get('_path', 'a record')}): its method time x{factor:.3g} (parameters "
        f"x images x iterations), plus its evaluation, made on {machines([chosen])}",
    )


def estimate(
    records: list[dict],
    task: str,
    dataset: str,
    model: str,
    method: str,
    profile: str,
    target: float,
    projections: Projections | None = None,
    budget: dict | None = None,
):
    """One cell's estimate (the module docstring says from what)."""
    same = [
        r
        for r in records
        if (r["task"], r["dataset"], r["model"], r["method"], r["profile"]["name"])
        == (task, dataset, model, method, profile)
    ]
    at_target = [r for r in same if round(r["target_sparsity"], 4) == round(target, 4)]
    for chosen, where in ((at_target, "at this target"), (same, "at other targets")):
        if chosen:
            seconds = statistics.median(float(r.get("wall_s") or 0) + float(r.get("eval_s") or 0) for r in chosen)
            return Estimate(seconds, f"median of {len(chosen)} record(s) {where}, made on {machines(chosen)}")
    projected = (projections or {}).get((model, method)) if (task, profile) == PROJECTED_PROFILE else None
    if projected:
        return projected
    comparable = scaled(records, task, dataset, model, method, profile, target, budget) if budget else None
    return comparable or Estimate(None, "unknown: no record of this method on a model of known size")


def machines(records: list[dict]) -> str:
    """Where the records behind an estimate ran: a machine's speed and load are not scaled, so the user sees them."""
    return "; ".join(sorted({str(r.get("device") or "an unnamed machine") for r in records}))


def grid_start(records: list[dict], task: str, dataset: str, model: str, dense_cached: bool) -> Estimate:
    """What a grid takes once before its cells: its start and, unless kept, the dense evaluation."""
    evals = [
        float(r["eval_s"])
        for r in records
        if (r["task"], r["dataset"], r["model"]) == (task, dataset, model) and r.get("eval_s")
    ]
    parts, seconds = [], START_S.get(task)
    if seconds is None:
        parts.append("start (data, weights) not estimated for this task")
    else:
        parts.append(f"start {duration(seconds)} (imports, data, weights; measured for CIFAR here)")
    if dense_cached:
        parts.append("dense metrics kept from an earlier run")
    elif evals:
        dense = statistics.median(evals)
        seconds = (seconds or 0.0) + dense
        parts.append(f"dense evaluation {duration(dense)} (median of {len(evals)} records' evaluations)")
    else:
        parts.append("dense evaluation not estimated (no record of this model and data)")
    return Estimate(seconds, "; ".join(parts))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def dry_run(args: argparse.Namespace, plans: Iterable, log: Callable[[str], None] = print) -> int:
    """List every planned cell: its record path, whether it has a record, and how long it should take."""
    folders = dict.fromkeys(Path(folder).resolve() for folder in (RUNS_DIR, args.results_dir))  # the committed too
    known = [r for folder in folders if folder.is_dir() for r in all_records(folder) if r.get("wall_s")]
    projected = scale_projections()
    total, unknown, cells, to_run = 0.0, 0, 0, 0
    for grid, methods, targets, _, note in plans:
        check_cells(grid, list(methods), list(targets))
        log(f"{grid.task} {grid.dataset} {grid.model}, profile {grid.profile.name}, seed {grid.seed}:")
        if note:
            log(f"  ({note})")
        grid_to_run = 0
        for method in methods:
            budget = {
                **cell_budget(grid.profile, method, grid.seed),
                "n_images": grid.profile.n_calibration_for(method),
            }
            for target in targets:
                cells += 1
                path = cell_path(grid, method, target).resolve()
                if not args.force and read_record(path) is not None:
                    log(f"  done     {method:18s} {target:6.2%}  {'-':>9s}  {path}")
                    continue
                to_run += 1
                grid_to_run += 1
                guess = estimate(
                    known, grid.task, grid.dataset, grid.model, method, grid.profile.name, target, projected, budget
                )
                total += guess.seconds or 0.0
                unknown += guess.seconds is None
                log(f"  to run   {method:18s} {target:6.2%}  {duration(guess.seconds):>9s}  {path}")
                log(f"           ({guess.basis})")
        if grid_to_run:
            cached = any((grid.checkpoints() / grid.task / grid.dataset / grid.model).glob("dense-*.json"))
            start = grid_start(known, grid.task, grid.dataset, grid.model, cached)
            total += start.seconds or 0.0
            log(f"  + once   {'(grid start)':26s}  {duration(start.seconds):>9s}  ({start.basis})")
    if to_run == unknown:
        time = "time unknown (no comparable record)" if to_run else "nothing to run"
    else:
        time = f"about {duration(total)} for the {to_run - unknown} with an estimate"
        time += f", {unknown} of unknown time" if unknown else ""
        time += " (times of the machines the records or projections ran on)"
    log(f"{cells} cell(s): {cells - to_run} with a record, {to_run} to run, {time}; nothing was run")
    return 0
