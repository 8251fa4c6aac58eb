"""Benchmark: every method on the paper's ImageNet models at 224 px, each cell probed in its own process (scale_cell)
and projected to the `paper` profile's budget (docs/notebook/benchmarks.md); peak memory; the paper's grid in hours."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks import parser
from benchmarks.scale.scale_cell import makes_size_choices, method_kind
from fcpts.core.io import write_json_atomic, write_text_atomic
from fcpts.methods import METHODS, get_method
from tasks.grid.imagenet_catalogue import PAPER_CNNS, PAPER_VITS, get_spec
from tasks.grid.layout import read_reference
from tasks.grid.paths import REPO_ROOT
from tasks.grid.records import command_line, device_description, git_commit

PAPER_MODELS = PAPER_CNNS + PAPER_VITS
GRID_TABLES = {"table3": "CNNs (Table 3)", "table4": "ViTs (Table 4)", "table1": "learned masks (Table 1)"}
# Probe sizes: each knob's value on a GPU beside its `--small` value on a CPU.
PROBE_SIZES = {
    "batch_sizes": ([64], [1]),
    "images": ([256, 512], [2, 6]),
    "iterations": ([100, 200], [2, 6]),
    "warmup": (3, 1),
    "steps": (5, 1),
    "layers": (4, 1),
    "train_images": (None, 4),
    "small_options": ({}, {"probe_images": 2}),
    "memory_line": (True, False),
}
SMALL = {knob: small for knob, (_, small) in PROBE_SIZES.items()} | {"paper_choices": True}
# On a GPU a layer-wise cell's first call (untimed) pays the device's one-time costs.
FULL = {knob: full for knob, (full, _) in PROBE_SIZES.items()} | {"warmup_probe": True, "paper_choices": True}


def paper_budget(method: str) -> dict:
    """The ImageNet task's `paper` profile for one method: calibration size, iterations, batch and options."""
    from tasks.imagenet.grid import PROFILES

    profile = PROFILES["paper"]
    m = get_method(method)
    options = profile.options_for(method) or {}
    budget = {"n_calibration": profile.n_calibration_for(method), "options": options}
    if m.trains:
        budget.update(iterations=profile.iterations, batch_size=profile.batch_size)
    elif "iterations" in m.options.field_names():
        budget["iterations"] = options.get("iterations", vars(m.make_options())["iterations"])
    return budget


def cache_bound_gb(method: str, budget: dict) -> float | None:
    """The most a method's cache adds to its memory (GB): `cache_bytes` times CACHE_COPIES; None without one."""
    m = get_method(method)
    copies = getattr(m.options, "CACHE_COPIES", None)
    if copies is None:
        return None
    return copies * budget["options"].get("cache_bytes", vars(m.make_options())["cache_bytes"]) / 1e9


def run_cell(model: str, method: str, sizes: dict, device: str, timeout_s: float, threads: int | None) -> dict:
    """One cell in a child process; its JSON line, or a timeout/crash record."""
    budget = paper_budget(method)
    spec = {
        "model": model,
        "method": method,
        "device": device,
        "threads": threads,
        "n_images": sizes["train_images"] or budget["n_calibration"],  # training methods sample batches from it
        "options": budget["options"],
        "paper_images": budget["n_calibration"],
        "paper_iterations": budget.get("iterations"),
        **sizes,
    }
    t = time.perf_counter()
    command = [sys.executable, "-m", "benchmarks.scale.scale_cell", json.dumps(spec)]
    try:
        proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": f"cell ran past its {timeout_s:.0f} s", "cell_s": timeout_s}
    lines = [x for x in proc.stdout.splitlines() if x.startswith("SCALE_CELL ")]
    if not lines:
        tail = (proc.stderr or proc.stdout)[-600:]
        return {"status": "crashed", "error": f"exit {proc.returncode}: {tail}", "cell_s": time.perf_counter() - t}
    cell = json.loads(lines[-1].removeprefix("SCALE_CELL "))
    cell["cell_s"] = round(time.perf_counter() - t, 2)
    return cell


# The probe sizes a kind of method depends on: a finished cell is kept (--resume, --merge) when these match.
SIZES_OF_KIND = {
    "training": ("batch_sizes", "warmup", "steps", "train_images", "small_options"),
    "layer-wise": ("images", "iterations", "layers", "warmup_probe", "paper_choices"),
    "one-shot": ("images",),
}


def same_probes(kind: str, a: dict, b: dict, method: str) -> bool:
    """Whether cells of this kind probed with sizes `a` count as probed with `b` (`paper_choices` only where the
    method makes such choices)."""
    knobs = SIZES_OF_KIND[kind]
    if not makes_size_choices(get_method(method)):
        knobs = tuple(k for k in knobs if k != "paper_choices")
    return all(a.get(k) == b.get(k) for k in knobs)


def line(x1: float, y1: float, x2: float, y2: float) -> tuple[float, float, bool]:
    """(intercept, slope, clamped) of the line through two points; where noise makes either negative, the line
    through the origin and the larger point, flagged as clamped."""
    slope = (y2 - y1) / (x2 - x1)
    intercept = y1 - slope * x1
    if slope < 0 or intercept < 0:
        return 0.0, y2 / x2, True
    return intercept, slope, False


def project_training(cell: dict, paper: dict, warmup: int) -> dict:
    """Per-step seconds at the paper's batch (in proportion from its one probe's), setup and projected seconds."""
    (probe,) = cell["probes"]
    per_step = statistics.median(probe["step_s"][warmup:] or probe["step_s"][-1:])
    if probe["batch_size"] != paper["batch_size"]:
        per_step = per_step * paper["batch_size"] / probe["batch_size"]
    setup = max(0.0, probe["wall_s"] - sum(probe.get("step_s") or [])) * paper["n_calibration"] / probe["images"]
    runs = cell.get("runs_per_cell", 1)
    return {
        "unit": "step",
        "unit_s": per_step,
        "setup_s": setup,
        "runs": runs,
        "projected_s": runs * (setup + paper["iterations"] * per_step),
        "clamped": False,
        "memory_x": "batch_size",
    }


def project_layerwise(cell: dict, paper: dict) -> dict:
    """The fitted line at the paper's images (and iterations), for the timed layers and scaled to the model; the
    time a run spends once (`wall_s - layers_s`) is its own line, where older probes did not split it."""
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
    """Peak memory at each probe, and (`extrapolate`) the line through the two smallest at the paper's size,
    capped at its intercept plus `bound_gb` (what a method's cache can add, docs/memory.md), flagged."""
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
        if extrapolate and len(points) >= 2:
            c0, c1, _ = line(*points[0], *points[1])
            out[key + "_at_paper"] = c0 + c1 * x_paper
            if bound_gb is not None and c0 + bound_gb < out[key + "_at_paper"]:
                out[key + "_at_paper"] = c0 + bound_gb
                out["cache_bounded_gb"] = bound_gb
    return out


def project_cell(
    cell: dict, paper: dict, warmup: int, memory_line: bool = True, cache_bound_gb: float | None = None
) -> dict:
    """The projection of one measured cell; `cache_bound_gb` bounds a layer-wise method's memory line."""
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


def paper_grid_cells() -> dict[str, set[tuple[str, str, float]]]:
    """The (model, method, sparsity) cells of the paper's ImageNet tables, by table (dense rows left out)."""
    cells: dict[str, set[tuple[str, str, float]]] = defaultdict(set)
    for row in read_reference():
        if row["table"] in GRID_TABLES and row["method"] != "dense" and row["sparsity"]:
            cells[row["table"]].add((row["model"], row["method"], float(row["sparsity"])))
    return cells


def grid_hours(cells_by_table: dict[str, set], minutes: dict[tuple[str, str], float]) -> dict:
    """Projected hours of each table and of the grid (a cell in two tables counted once); the missing cells."""
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


def fmt_time(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def fmt_one(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def fmt_mem(values: list[float] | None) -> str:
    return " / ".join(f"{v:.2f}" for v in values) if values else "-"


def markdown(result: dict) -> str:
    """The model x method table, then the grid's projected hours."""
    device, sizes = result["device"], result["sizes"]
    unit_of = {"training": "per step", "layer-wise": "per layer", "one-shot": "per run"}
    lines = [
        f"# Scale benchmark: {result['device_description']}",
        "",
        f"{result['mode']} mode; budgets: the ImageNet task's `paper` profile; probes: {json.dumps(sizes)}.",
        "Time per step (training loop, at the paper's batch of 64) or per layer (layer-wise, at the paper's images "
        "and iterations), projected from the probes (docs/notebook/benchmarks.md); a cell's projected minutes; "
        "peak memory in GB at each probe (host RSS; CUDA allocated), then the line through them at the paper's size, "
        "capped where a method's cache bounds it (docs/memory.md).",
    ]
    if result.get("note"):
        lines += ["", f"Note: {result['note']}"]
    lines += [
        "",
        "| model | method | kind | time | projected cell min | peak host GB (probes) | host GB at paper size "
        "| peak CUDA GB (probes) | CUDA GB at paper size | status |",
        "|---|---|---|---:|---:|---|---:|---|---:|---|",
    ]
    for cell in result["cells"]:
        p = cell.get("projection") or {}
        mem = p.get("memory", {})
        kind = cell.get("kind", method_kind(get_method(cell["method"])) if cell["method"] in METHODS else "?")
        status = cell["status"] if cell["status"] == "ok" else f"{cell['status']}: {cell.get('error', '')[:80]}"
        status = status.replace("|", "/").replace("\n", " ")
        if p.get("clamped"):
            status += " (a slope clamped)"
        if p.get("passes") == "scaled with the layers":
            status += " (the run's own passes scaled with the layers too)"
        if mem.get("cache_bounded_gb") is not None:
            status += f" (memory line capped: cache {mem['cache_bounded_gb']:.0f} GB)"
        time_s = f"{fmt_time(p['unit_s'])} {unit_of.get(kind, '')}" if p else "-"
        if p.get("runs", 1) > 1:
            time_s += f", up to {p['runs']} runs"
        minutes = fmt_one(p["projected_s"] / 60 if p else None)
        rss, cuda = (
            f"{fmt_mem(mem.get(k))} | {fmt_one(mem.get(k + '_at_paper'))}" for k in ("peak_rss_gb", "peak_cuda_gb")
        )
        lines.append(
            f"| {cell['model']} | {cell['method']} | {kind} | {time_s} | {minutes} | {rss} | {cuda} | {status} |"
        )
    grid = result["grid"]
    where = "this CPU" if device == "cpu" else result["device_description"]
    lines += [
        "",
        f"## The paper's ImageNet grid, projected hours on {where}",
        "",
        f"Cells of the paper's {', '.join(GRID_TABLES.values())} (results/paper/paper_reference.csv), "
        "each at its (model, method)'s "
        "projected minutes (the sparsity does not change the work); a cell in two tables counts once in the total.",
        "",
        "| table | cells | projected hours | cells without a projection |",
        "|---|---:|---:|---:|",
    ]
    for table, row in grid["tables"].items():
        lines.append(f"| {GRID_TABLES[table]} | {row['cells']} | {row['hours']:.1f} | {row['missing']} |")
    lines.append(f"| whole grid (unique cells) | {grid['unique_cells']} | {grid['total_hours']:.1f} | |")
    lines += [
        "",
        f"command: {result['command']}",
        f"commit {result['git_commit']}, torch {result['torch']}, {result['threads']} torch threads a cell, "
        f"load average at the end {result['load_end']}, created {result['created']}, "
        + (
            f"merged: its cells took {result['merged_cells_s']:,.0f} s together"
            if "merged_cells_s" in result
            else f"{result['wall_s']:.0f} s in all"
        ),
    ]
    if result.get("projected_by"):
        lines.append(f"projections recomputed from the probes by commit {result['projected_by']}")
    return "\n".join(lines) + "\n"


def finish(result: dict, sizes: dict) -> dict:
    """Projections of every cell and the grid's hours."""
    minutes = {}
    for cell in result["cells"]:
        if cell["status"] == "ok":
            budget = paper_budget(cell["method"])
            cell["projection"] = project_cell(
                cell, budget, sizes["warmup"], sizes["memory_line"], cache_bound_gb(cell["method"], budget)
            )
            minutes[(cell["model"], cell["method"])] = cell["projection"]["projected_s"] / 60
    result["grid"] = grid_hours(paper_grid_cells(), minutes)
    return result


def parse_args(argv=None) -> argparse.Namespace:
    p = parser("scale")
    args = p.parse_args(argv)
    if args.reproject:
        if not args.out or not Path(args.out).is_file():
            p.error("--reproject needs --out naming an existing scale output (e.g. results/benchmarks/scale_cuda.json)")
        return args
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda asked for, but CUDA is not available here; use --device cpu")
    missing = [m for m in args.merge if not Path(m).is_file()]
    if missing:
        p.error(f"--merge: no such file {', '.join(missing)}")
    if args.paper_grid and (args.models or args.methods):
        p.error("--paper-grid chooses the cells itself: leave out --models and --methods")
    args.models = args.models or PAPER_MODELS
    args.methods = args.methods or list(METHODS)
    try:
        for name in args.models:
            get_spec(name)
    except ValueError as e:
        p.error(str(e))
    return args


def measured_on(output: dict, device: str) -> bool:
    """Whether a scale output was measured on this machine's `device` (one output holds one GPU's times)."""
    return output["device_description"] == device_description(device)


def cells_to_run(args: argparse.Namespace, done: dict) -> list[tuple[str, str]]:
    """--models x --methods; with --paper-grid, the pairs of the paper's ImageNet tables and the kept cells."""
    if not args.paper_grid:
        return [(model, method) for model in args.models for method in args.methods]
    pairs = {(model, method) for cells in paper_grid_cells().values() for model, method, _ in cells}
    pairs |= set(done)
    models, methods = PAPER_MODELS, list(METHODS)
    rank = {(m, meth): (models.index(m) if m in models else len(models), methods.index(meth)) for m, meth in pairs}
    return sorted(pairs, key=rank.__getitem__)


def reproject(out: Path) -> dict:
    """An earlier output's projections and table recomputed from its probes; the commit that did it named."""
    result = json.loads(out.read_text())
    finish(result, result["sizes"])
    result["projected_by"] = git_commit()
    write_json_atomic(out, result)
    write_text_atomic(out.with_suffix(".md"), markdown(result))
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.reproject:
        return reproject(Path(args.out))
    sizes = SMALL if args.small else FULL
    name = f"scale_{args.device}{'_small' if args.small else ''}.json"
    out = Path(args.out or REPO_ROOT / "results" / "benchmarks" / name)
    done: dict = {}
    failed: dict = {}  # cells that failed before, shown as such by --merge-only
    own = [out] if args.resume and out.is_file() else []
    for path in own + [Path(m) for m in args.merge]:
        earlier = json.loads(path.read_text())
        again = set() if path in own else set(args.again)  # a merged output's cells of these are measured anew
        if args.device == "cuda" and not measured_on(earlier, args.device):
            raise SystemExit(
                f"{path} was measured on {earlier['device_description']}, this run on "
                f"{device_description(args.device)}: one output holds one GPU's times (run without it, or there)"
            )
        for c in earlier["cells"]:
            c.setdefault("git_commit", earlier["git_commit"])  # a kept cell names the code that measured it
            if c["status"] in ("crashed", "timeout", "error"):
                failed[c["model"], c["method"]] = c
            elif c["status"] == "ok" and c["method"] not in again:
                if same_probes(c["kind"], earlier["sizes"], sizes, c["method"]):
                    done[c["model"], c["method"]] = c
    t0 = time.perf_counter()
    result = {
        "mode": "small" if args.small else "full",
        "device": args.device,
        "device_description": device_description(args.device),
        "sizes": sizes,
        "note": args.note,
        "command": command_line(),
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "threads": args.threads or torch.get_num_threads(),
        "budgets": {m: paper_budget(m) for m in args.methods},
        "cells": [],
    }
    for model, method in cells_to_run(args, done):
        if (model, method) in done:
            cell = done[(model, method)]
        elif args.merge_only:
            cell = failed.get((model, method)) or {
                "status": "not measured",
                "error": "no finished cell in the merged outputs",
            }
        elif args.budget_s is not None and time.perf_counter() - t0 > args.budget_s:
            cell = {"status": "skipped", "error": f"not started: past the {args.budget_s:.0f} s budget"}
        else:
            cell = run_cell(model, method, sizes, args.device, args.cell_timeout, args.threads)
            cell["git_commit"] = result["git_commit"]
        cell = {"model": model, "method": method, **{k: v for k, v in cell.items() if k not in ("model", "method")}}
        result["cells"].append(cell)
        print(f"{model:14s} {method:16s} {cell['status']:8s} {cell.get('cell_s', 0):7.1f} s", flush=True)
        write_json_atomic(out, result)  # what is measured survives an interrupted run
    result["wall_s"] = time.perf_counter() - t0
    if args.merge_only:  # its own wall time is none of the cells'
        result["merged_cells_s"] = sum(c.get("cell_s") or 0.0 for c in result["cells"])
    result["load_end"] = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    result["created"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    finish(result, sizes)
    write_json_atomic(out, result)
    text = markdown(result)
    write_text_atomic(out.with_suffix(".md"), text)
    print(text)
    return result
