"""The scale benchmark's arithmetic: a cell's measured probes projected to the paper's budget, and the paper's
ImageNet grid (its CNN, ViT and learned-mask tables: GRID_TABLES) summed from the projected cells. Pure
functions of the measurements.

Projections (each a straight line through the probes, documented in docs/notebook/benchmarks.md):
- training: the median step time at each probed batch size (after the warm-up steps); at the paper's batch
  when it was probed, else the line through two batch sizes (or proportional to one) at the paper's batch.
  Cell = runs x (setup + iterations x step), `runs` the searched runs of a method that searches (STR), setup the
  probe's time outside its steps, in proportion to the paper's calibration size over the probe's.
- layer-wise: time = c0 + c_images x images (+ c_iterations x per-layer iterations) through the probes, taken at
  the paper's calibration size and iterations, for the time spent on the layers timed; then scaled to every layer
  by their share of the model's multiply-accumulates (the `params` projection scales by weight count instead);
  plus the rest of the probes' time, spent once a run, through the images alone. Probes that did not say how
  their time split have their whole time scaled (flagged).
- one-shot: the run as measured.
A fitted line with a negative slope or intercept (noise of a shared machine) becomes the line through the origin
and the larger probe (time in proportion to size), flagged as clamped.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

GRID_TABLES = {"table3": "CNNs (Table 3)", "table4": "ViTs (Table 4)", "table1": "learned masks (Table 1)"}


def line(x1: float, y1: float, x2: float, y2: float) -> tuple[float, float, bool]:
    """(intercept, slope, clamped) of the line through two points (x2 > x1 > 0). Where noise makes the slope or
    the intercept negative, the line through the origin and the larger point instead (time in proportion to
    size), flagged as clamped."""
    if x2 == x1:
        return (y1 + y2) / 2, 0.0, False
    slope = (y2 - y1) / (x2 - x1)
    intercept = y1 - slope * x1
    if slope < 0 or intercept < 0:
        return 0.0, y2 / x2, True
    return intercept, slope, False


def timed_steps(probe: dict, warmup: int) -> list[float]:
    steps = probe.get("step_s") or []
    return steps[warmup:] or steps[-1:]


def project_training(cell: dict, paper: dict, warmup: int) -> dict:
    """Per-step seconds at the paper's batch, setup seconds and the cell's projected seconds."""
    probes = sorted(cell["probes"], key=lambda p: p["batch_size"])
    step = {p["batch_size"]: statistics.median(timed_steps(p, warmup)) for p in probes}
    batch = paper["batch_size"]
    clamped = False
    if batch in step:
        per_step = step[batch]
    elif len(probes) >= 2:
        (b1, t1), (b2, t2) = list(step.items())[0], list(step.items())[-1]
        c0, c1, clamped = line(b1, t1, b2, t2)
        per_step = c0 + c1 * batch
    else:
        (b1, t1) = next(iter(step.items()))
        per_step = t1 * batch / b1
    last = probes[-1]
    # The setup passes over the calibration set: in proportion to the paper's calibration size.
    setup = max(0.0, last["wall_s"] - sum(last.get("step_s") or [])) * paper["n_calibration"] / last["images"]
    runs = cell.get("runs_per_cell", 1)
    return {
        "unit": "step",
        "unit_s": per_step,
        "setup_s": setup,
        "runs": runs,
        "projected_s": runs * (setup + paper["iterations"] * per_step),
        "clamped": clamped,
        "memory_x": "batch_size",
    }


def project_layerwise(cell: dict, paper: dict) -> dict:
    """The fitted line at the paper's images (and iterations), for the timed layers and for the model. Where the
    probes say how much of their time went to the layers (`layers_s`), only that part is scaled to the model and
    the rest, which a run spends once, is its own line in the images; older probes scale their whole time
    (`passes`: "scaled with the layers")."""
    probes = cell["probes"]
    p1, p2 = probes[0], probes[1]
    split = all("layers_s" in p for p in probes)
    work = [p["layers_s"] if split else p["wall_s"] for p in probes]
    c0, c_images, clamped = line(p1["images"], work[0], p2["images"], work[1])
    timed = c0 + c_images * paper["n_calibration"]
    fit = {"c0_s": c0, "c_images_s": c_images}
    if len(probes) > 2 and "iterations" in probes[2]:
        p3 = probes[2]
        _, c_iter, clamped_i = line(p1["iterations"], work[0], p3["iterations"], work[2])
        clamped = clamped or clamped_i
        timed += c_iter * (paper["iterations"] - p1["iterations"])
        fit["c_iterations_s"] = c_iter
    once = 0.0
    if split:
        rest = [max(0.0, p["wall_s"] - p["layers_s"]) for p in (p1, p2)]
        if rest[1] < rest[0]:  # noise on a part that hardly grows with the images: the larger, held
            o0, o_images, clamped = max(rest), 0.0, True
        else:
            o0, o_images, clamped_o = line(p1["images"], rest[0], p2["images"], rest[1])
            clamped = clamped or clamped_o
        once = o0 + o_images * paper["n_calibration"]
        fit |= {"once_c0_s": o0, "once_c_images_s": o_images}
    by_macs = cell["macs_total"] / max(cell["macs_timed"], 1)
    by_params = cell["params_total"] / max(cell["params_timed"], 1)
    return {
        "unit": "layer",
        "unit_s": timed / len(cell["layers_timed"]),
        "fit": fit,
        "once_s": once,
        "passes": "once" if split else "scaled with the layers",
        "projected_s": timed * by_macs + once,
        "projected_s_by_params": timed * by_params + once,
        "clamped": clamped,
        "memory_x": "images",
    }


def project_memory(
    cell: dict, x_key: str, x_paper: float, extrapolate: bool = True, bound_gb: float | None = None
) -> dict:
    """Peak memory at each probe, and (`extrapolate`) the line through the two smallest probes at the paper's
    size; probes of a few images differ by less than the allocator's noise, so tiny probes are not extrapolated.
    `bound_gb`: what a method's cache can add at most (its `cache_bytes` times the buffers it holds,
    docs/memory.md); small probes fill the cache in proportion to the images, so their line overstates a
    bounded method at the paper's size: it is capped at the line's intercept plus the bound, and flagged."""
    out: dict = {}
    for key in ("peak_rss_gb", "peak_cuda_gb"):
        points = [(p[x_key], p[key]) for p in cell["probes"] if key in p and x_key in p]
        if not points:
            continue
        out[key] = [y for _, y in points]
        at_size = [y for x, y in points if x == x_paper]
        if at_size:  # measured at the paper's size (a GPU run at the paper's batch)
            out[key + "_at_paper"] = max(at_size)
            continue
        if extrapolate and len(points) >= 2 and points[1][0] != points[0][0]:
            c0, c1, _ = line(*points[0], *points[1])
            out[key + "_at_paper"] = c0 + c1 * x_paper
            if bound_gb is not None and c0 + bound_gb < out[key + "_at_paper"]:
                out[key + "_at_paper"] = c0 + bound_gb
                out["cache_bounded_gb"] = bound_gb
    return out


def project_cell(
    cell: dict, paper: dict, warmup: int, memory_line: bool = True, cache_bound_gb: float | None = None
) -> dict:
    """The projection of one measured cell (see the module's docstring); `cache_bound_gb` bounds a layer-wise
    method's memory line (project_memory)."""
    if cell.get("status") != "ok":
        return {}
    kind = cell["kind"]
    if kind == "training":
        out = project_training(cell, paper, warmup)
        out["memory"] = project_memory(cell, "batch_size", paper["batch_size"], memory_line)
    elif kind == "layer-wise":
        out = project_layerwise(cell, paper)
        out["memory"] = project_memory(cell, "images", paper["n_calibration"], memory_line, cache_bound_gb)
    else:
        out = {"unit": "run", "unit_s": cell["probes"][0]["wall_s"], "projected_s": cell["probes"][0]["wall_s"]}
        out["memory"] = project_memory(cell, "images", paper["n_calibration"], extrapolate=False)
    return out


def paper_grid_cells(reference_csv: Path) -> dict[str, set[tuple[str, str, float]]]:
    """The (model, method, sparsity) cells of the paper's ImageNet tables, by table (dense rows left out)."""
    cells: dict[str, set[tuple[str, str, float]]] = defaultdict(set)
    with open(reference_csv) as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            if row["table"] in GRID_TABLES and row["method"] != "dense" and row["sparsity"]:
                cells[row["table"]].add((row["model"], row["method"], float(row["sparsity"])))
    return cells


def grid_hours(cells_by_table: dict[str, set], minutes: dict[tuple[str, str], float]) -> dict:
    """Projected hours of each table and of the whole grid; a cell in two tables counts once in the total.
    Cells whose (model, method) has no projection are listed as missing."""
    out: dict = {"tables": {}, "missing": []}
    seen: set = set()
    total = 0.0
    for table, cells in cells_by_table.items():
        hours, missing = 0.0, []
        for model, method, sparsity in sorted(cells):
            m = minutes.get((model, method))
            if m is None:
                missing.append(f"{model}/{method}/{sparsity}")
                continue
            hours += m / 60
            if (model, method, sparsity) not in seen:
                seen.add((model, method, sparsity))
                total += m / 60
        out["tables"][table] = {"cells": len(cells), "hours": hours, "missing": len(missing)}
        out["missing"] += missing
    out["unique_cells"] = len(set().union(*cells_by_table.values())) if cells_by_table else 0
    out["total_hours"] = total
    return out
