"""Regression check: re-run a few real cells of each paper table and compare with committed references.

    python -m tasks.regression                  # re-run into a temporary folder, compare, exit 1 on a regression
    python -m tasks.regression --update         # (re)write the reference records in results/regression/
    python -m tasks.regression --tables 2 5     # only some tables' subsets
    python -m tasks.regression --tolerances     # each tolerance and what decided it

One subset per table, on real images and real dense weights, at a `regression` profile of its own (a budget this
check affords, never a result), each cell well above chance and well below dense. The subsets, the measurements
behind each tolerance and the re-runs on other processors (results/regression/spread/): docs/tasks.md.
"""

from __future__ import annotations

import functools
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.grid.help import command_parser, deprecated_alias, run_command
from tasks.grid.paths import RESULTS_DIR

if TYPE_CHECKING:  # the subsets, their records and the re-runs import torch when used: --help needs none of it
    from tasks.grid.profiles import Profile

REFERENCE_DIR = RESULTS_DIR / "regression"
SPREAD_DIR = REFERENCE_DIR / "spread"  # <machine>/<task>/...: the subsets re-run on other processors
NOTE = "regression check only; not a result"
SEED = 0
Tolerances = dict[str, dict[str, float]]  # per task, per metric: how many points a re-run may move

# Points a cell's metric (and its dense model's) may move when only the summation order changes (docs/tasks.md).
SUMMATION_TOLERANCE = {
    "cifar": {"top1": 1.6, "top5": 1.6},
    "imagenet": {"top1": 1.6, "top5": 1.6},
    "voc": {"map50": 2.1},
}
SPREAD_FACTOR = 2.0  # a tolerance is twice the largest move measured, as for the summation bound
VOC_TRAINVAL = 64  # substitute images written for calibration (the set's first ones)


@dataclass(frozen=True)
class Subset:
    """The cells of one paper table that the check re-runs, and the arguments of their task's grid."""

    table: str
    task: str
    dataset: str  # the grid's names, so a reference is found without loading data
    model: str
    profile: Profile
    cells: tuple[tuple[str, float], ...]  # (method, target sparsity)
    metrics: tuple[str, ...]
    grid_args: dict

    def paths(self, runs_dir: Path) -> list[Path]:
        from tasks.grid.records import record_path

        return [
            record_path(runs_dir, self.task, self.dataset, self.model, m, sp, self.profile.name, SEED)
            for m, sp in self.cells
        ]


def regression_profile(
    n_calibration: int, iterations: int, batch_size: int, pot_iterations: int, eval_limit: int, pot_images: int = 0
) -> Profile:
    """A subset's budget, named `regression` so its records never pass for a result; POT on its first
    `pot_images` calibration images where its statistics would cost the check more than they tell."""
    from tasks.grid.profiles import cpu_profile, pot_budget

    pot = pot_budget(pot_images, pot_iterations) if pot_images else None
    return cpu_profile("regression", n_calibration, iterations, batch_size, pot_iterations, eval_limit, pot).with_note(
        NOTE
    )


TABLES = ("2", "3", "5")  # the tables `all_subsets` covers, for --tables without building them


@functools.cache
def all_subsets() -> tuple[Subset, ...]:
    return (
        Subset(
            "Table 2",
            "cifar",
            "cifar10",
            "resnet20",
            regression_profile(256, iterations=100, batch_size=64, pot_iterations=100, eval_limit=2000),
            (("fcpts", 0.9), ("pot-l2norm", 0.7), ("pot-erk", 0.7), ("lamp", 0.7)),
            ("top1", "top5"),
            {"dataset": "cifar10", "model": "resnet20"},
        ),
        Subset(
            "Table 3",
            "imagenet",
            "imagenet-val1300",
            "efficientnet_lite0",
            regression_profile(64, iterations=40, batch_size=8, pot_iterations=20, eval_limit=128, pot_images=32),
            (("global-magnitude", 0.4), ("fcpts", 0.5), ("pot-l2norm", 0.6)),
            ("top1", "top5"),
            {"model_name": "efficientnet_lite0"},
        ),
        Subset(
            "Table 5",
            "voc",
            "voc-cifar10-test100",
            "mb2-ssd-lite-160",
            regression_profile(64, iterations=20, batch_size=16, pot_iterations=20, eval_limit=100),
            (("fcpts", 0.5), ("pot-l2norm", 0.2)),
            ("map50",),
            {"arch": "mb2-ssd-lite", "image_size": 160},
        ),
    )


def _record_pairs(subset: Subset, new_dir: Path, reference_dir: Path):
    """(reference path, new path, reference record, new record) per cell of the subset; a missing record is None."""
    from tasks.grid.records import read_record

    for ref_path, new_path in zip(subset.paths(reference_dir), subset.paths(new_dir)):
        yield ref_path, new_path, read_record(ref_path), read_record(new_path)


def measured_spread(
    subsets: tuple[Subset, ...] | None = None, reference_dir: Path = REFERENCE_DIR, spread_dir: Path = SPREAD_DIR
) -> dict[str, dict[str, tuple[float, str]]]:
    """task -> metric -> (largest |move| against the references, where it was seen) over the re-runs kept under
    spread_dir/<machine>/ (a metric and its dense model's both count; a cell missing there is skipped)."""
    spread: dict[str, dict[str, tuple[float, str]]] = {}
    machines = sorted(p for p in spread_dir.iterdir() if p.is_dir()) if spread_dir.is_dir() else []
    for machine in machines:
        for subset in subsets or all_subsets():
            for ref_path, new_path, ref, new in _record_pairs(subset, machine, reference_dir):
                if ref is None or new is None:
                    continue
                for key in ("metrics", "dense_metrics"):
                    for metric in subset.metrics:
                        move = abs(new[key][metric] - ref[key][metric])
                        seen = f"{machine.name} ({new.get('device')}): {new_path.stem} {key} {metric}"
                        if move > spread.setdefault(subset.task, {}).get(metric, (-1.0, ""))[0]:
                            spread[subset.task][metric] = (move, seen)
    return spread


def derive_tolerances(spread: dict[str, dict[str, tuple[float, str]]]) -> tuple[Tolerances, list[str]]:
    """(task -> metric -> tolerance, one line per bound saying what decided it): the summation bound, or
    SPREAD_FACTOR x the cross-processor move (rounded up to 0.01, float noise ignored) when that is larger."""
    tolerances: Tolerances = {}
    why = []
    for task, metrics in SUMMATION_TOLERANCE.items():
        for metric, floor in metrics.items():
            move, seen = spread.get(task, {}).get(metric, (None, ""))
            measured = math.ceil(round(SPREAD_FACTOR * move * 100, 6)) / 100 if move is not None else None
            tolerances.setdefault(task, {})[metric] = max(floor, measured or 0.0)
            source = f"{SPREAD_FACTOR:g} x {move:.2f} measured on {seen}" if move is not None else "no re-run elsewhere"
            decided = "the processor spread" if measured is not None and measured > floor else "the summation bound"
            why.append(
                f"{task} {metric}: ±{tolerances[task][metric]:.2f} ({decided}; summation bound {floor:.2f}, "
                f"processor spread: {source})"
            )
    return tolerances, why


@functools.cache
def tolerance_table() -> tuple[Tolerances, list[str]]:
    """The tolerances and what decided each, from the re-runs kept under SPREAD_DIR (read once)."""
    return derive_tolerances(measured_spread())


def run_subset(subset: Subset, runs_dir: Path, threads: int = 1, log: Callable[[str], None] = print) -> float:
    """Run one subset's cells into runs_dir on `threads` threads; its wall time in seconds, data and dense
    evaluation included."""
    import torch

    from tasks.grid.paths import resolve_data_root
    from tasks.grid.rerun import get_task
    from tasks.grid.runner import Where, run_grid

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    tic = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            # Checkpoints and the dense evaluation's cache in scratch: every run evaluates the dense model afresh.
            where = Where(seed=SEED, runs_dir=runs_dir, checkpoint_dir=Path(scratch) / "checkpoints", progress=False)
            task = get_task(subset.task)
            if task.make_data is not None:  # the detection substitute, regenerated (seconds; not committed)
                out = Path(scratch) / "voc-cifar"
                task.make_data(
                    out, resolve_data_root(where.data_root), trainval_prefix=VOC_TRAINVAL, log=lambda _: None
                )
                where = replace(where, data_root=str(out))
            grid = task.build_grid(**subset.grid_args, profile=subset.profile, where=where)
            if (grid.dataset, grid.model) != (subset.dataset, subset.model):
                raise ValueError(
                    f"{subset.table}: the data gives {grid.dataset}/{grid.model}, the references are of "
                    f"{subset.dataset}/{subset.model}; other data is not this check's (--update re-makes them)"
                )
            for method, target in subset.cells:
                run_grid(grid, [method], [target], force=True, log=log)
    finally:
        torch.set_num_threads(before)
    return time.perf_counter() - tic


def compare_subset(
    subset: Subset, new_dir: Path, reference_dir: Path = REFERENCE_DIR, tolerances: Tolerances | None = None
) -> list[str]:
    """Problems in one subset (empty: no regression). A missing record on either side is a problem too."""
    tolerance = (tolerances or tolerance_table()[0])[subset.task]
    problems = []
    for ref_path, new_path, ref, new in _record_pairs(subset, new_dir, reference_dir):
        name = f"{subset.table} {ref_path.relative_to(reference_dir)}"
        if ref is None:
            problems.append(f"{name}: no reference record in {reference_dir} (run with --update once)")
            continue
        if new is None:
            problems.append(f"{name}: the re-run wrote no record")
            continue
        if new["achieved_sparsity"] != ref["achieved_sparsity"] or not new["hit_target"]:
            problems.append(
                f"{name}: sparsity {new['achieved_sparsity']:.9f} vs reference {ref['achieved_sparsity']:.9f}"
            )
        problems += [
            f"{name}: {what}{m} {value:.2f} vs reference {ref_value:.2f} ({move:+.2f}, more than ±{limit})"
            for what, m, value, ref_value, move, limit in _moves(subset, ref, new, tolerance)
            if not abs(move) <= limit  # a NaN moves by NaN: a regression, never within the tolerance
        ]
    return problems


def _moves(subset: Subset, ref: dict, new: dict, tolerance: dict[str, float]):
    """(what, metric, new value, reference value, move, tolerance) for every metric and dense metric of a cell."""
    for key, what in (("metrics", ""), ("dense_metrics", "dense ")):
        for m in subset.metrics:
            yield what, m, new[key][m], ref[key][m], new[key][m] - ref[key][m], tolerance[m]


def margins(
    subset: Subset, new_dir: Path, reference_dir: Path = REFERENCE_DIR, tolerances: Tolerances | None = None
) -> list[tuple[float, str]]:
    """(margin, what) for every metric and dense metric of every re-run cell with a reference: how many points
    of its tolerance a move leaves (negative: a regression)."""
    return [
        (limit - abs(move), f"{subset.table} {new_path.stem} {what}{m} {move:+.2f} of ±{limit:.2f}")
        for _, new_path, ref, new in _record_pairs(subset, new_dir, reference_dir)
        if ref is not None and new is not None
        for what, m, _, _, move, limit in _moves(subset, ref, new, (tolerances or tolerance_table()[0])[subset.task])
    ]


def cell_lines(
    subset: Subset, new_dir: Path, reference_dir: Path = REFERENCE_DIR, tolerances: Tolerances | None = None
) -> list[str]:
    """One line per re-run cell: each metric beside the reference's, its move and the margin its tolerance leaves,
    the dense model's, and the times; then the processors of the references and of this run."""
    tolerance = (tolerances or tolerance_table()[0])[subset.task]
    lines, devices = [], set()
    for _, new_path, ref, new in _record_pairs(subset, new_dir, reference_dir):
        if new is None:
            continue
        devices.add(((ref or {}).get("device"), new.get("device")))
        shown = "  ".join(_metric_line(m, new, ref, tolerance[m]) for m in subset.metrics)
        lines.append(f"{subset.table} {new_path.stem:34s} {shown}  {new['wall_s']:5.1f}s + eval {new['eval_s']:4.1f}s")
    for ref_device, new_device in sorted(devices, key=str):
        lines.append(f"{subset.table} references ran on {ref_device}; this run on {new_device}")
    return lines


def _metric_line(m: str, new: dict, ref: dict | None, tolerance: float) -> str:
    if ref is None:
        return f"{m} {new['metrics'][m]:6.2f} (no reference; dense {new['dense_metrics'][m]:6.2f})"
    move = new["metrics"][m] - ref["metrics"][m]
    return (
        f"{m} {new['metrics'][m]:6.2f} (reference {ref['metrics'][m]:6.2f}, {move:+.2f} of ±{tolerance:.2f}: "
        f"margin {tolerance - abs(move):.2f}; dense {new['dense_metrics'][m]:6.2f})"
    )


def rerun(subsets: tuple[Subset, ...], runs_dir: Path, threads: int) -> None:
    """Re-run `subsets` into runs_dir, printing each cell and each subset's time."""
    total = 0.0
    for subset in subsets:
        seconds = run_subset(subset, runs_dir, threads)
        total += seconds
        print("\n".join(cell_lines(subset, runs_dir)))
        print(f"{subset.table}: {seconds:.0f}s on {threads} thread(s)")
    print(f"all subsets: {total:.0f}s")


def main(argv=None) -> int:
    p = command_parser("python -m tasks.regression", __doc__)
    p.add_argument("--update", action="store_true", help="rewrite the committed reference records")
    p.add_argument("--tables", nargs="+", choices=TABLES, help="only these tables' subsets")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the check and its references use 1)")
    p.add_argument(
        "--results-dir",
        help="re-run into this folder and keep it (default: a temporary one); kept under "
        "results/regression/spread/<machine>/, a run on another processor widens the tolerances it measures",
    )
    deprecated_alias(p, "--keep", "--results-dir", "results_dir")
    p.add_argument("--tolerances", action="store_true", help="print each tolerance and what decided it, run nothing")
    p.add_argument(
        "--no-onednn", action="store_true", help="PyTorch's own kernels instead of oneDNN's (another summation order)"
    )
    args = p.parse_args(argv)
    if args.tolerances:
        print("\n".join(tolerance_table()[1]))
        return 0
    if args.update and (args.threads != 1 or args.no_onednn):
        p.error("references are made on one thread with oneDNN, as the check runs")
    if args.no_onednn:
        import torch

        torch.backends.mkldnn.set_flags(False)
    subsets = tuple(s for s in all_subsets() if s.table.removeprefix("Table ") in (args.tables or TABLES))
    if args.update:
        rerun(subsets, REFERENCE_DIR, args.threads)
        print(f"reference records written to {REFERENCE_DIR}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:  # the re-run's folder unless --results-dir keeps it
        runs_dir = Path(args.results_dir or tmp)
        rerun(subsets, runs_dir, args.threads)
        if left := sorted(m for s in subsets for m in margins(s, runs_dir)):
            print(f"smallest margin: {left[0][0]:.2f} points ({left[0][1]})")
        problems = [p for s in subsets for p in compare_subset(s, runs_dir)]
    if problems:
        print("REGRESSION:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    cells = sum(len(s.cells) for s in subsets)
    print(f"no regression: {cells} cells within {tolerance_table()[0]} points of their references, same sparsity")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
