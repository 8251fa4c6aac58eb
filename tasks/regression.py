"""Regression check: re-run a small fixed subset (quick profile) and compare to committed records.

    python -m tasks.regression            # re-run into a temporary folder, compare, exit 1 on a regression
    python -m tasks.regression --update   # (re)write the reference records in results/regression/

The subset covers the code paths the paper's tables depend on: FCPTS, both POT allocations and a
magnitude baseline, on the real CIFAR-10 ResNet-20 checkpoint and real CIFAR-10 images. Runs are
deterministic for a seed and a thread count, so the subset always runs on one thread; float reductions
can still order differently on another CPU (measured here: 1 vs 2 threads moved FCPTS's quick 90% cell
by 1.1 points, its 80% cell by 0.6). A cell passes when the achieved sparsity is the same and top-1/top-5
lie within TOLERANCE points (the quick profile evaluates 1,000 test images: one point is ten images).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from tasks.cifar import grid as cifar
from tasks.grid import cli
from tasks.grid.paths import RESULTS_DIR
from tasks.grid.records import read_record, record_path
from tasks.grid.runner import Where, run_grid

REFERENCE_DIR = RESULTS_DIR / "regression"
TOLERANCE = 1.5  # top-1 / top-5 points
SUBSET = {
    "dataset": "cifar10",
    "model": "resnet20",
    "methods": ["fcpts", "pot-l2norm", "pot-erk", "lamp"],
    "sparsity": [0.9],
    "profile": "quick",
    "seed": 0,
}


def run_subset(runs_dir: Path, progress: bool = False) -> None:
    """Run the subset into runs_dir on one thread (see the module docstring)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _run(runs_dir, progress)
    finally:
        torch.set_num_threads(threads)


def _run(runs_dir: Path, progress: bool) -> None:
    where = Where(seed=SUBSET["seed"], runs_dir=runs_dir, progress=progress)
    profile = cifar.PROFILES[SUBSET["profile"]]
    grid = cifar.build_grid(dataset=SUBSET["dataset"], model=SUBSET["model"], profile=profile, where=where)
    run_grid(grid, SUBSET["methods"], SUBSET["sparsity"], force=True)


def subset_paths(runs_dir: Path) -> list[Path]:
    return [
        record_path(runs_dir, "cifar", SUBSET["dataset"], SUBSET["model"], m, sp, SUBSET["profile"], SUBSET["seed"])
        for m in SUBSET["methods"]
        for sp in SUBSET["sparsity"]
    ]


def compare(new_dir: Path, reference_dir: Path = REFERENCE_DIR, tolerance: float = TOLERANCE) -> list[str]:
    """Problems found (empty: no regression). A missing reference record is a problem too."""
    problems = []
    for ref_path, new_path in zip(subset_paths(reference_dir), subset_paths(new_dir)):
        name = ref_path.name
        ref, new = read_record(ref_path), read_record(new_path)
        if ref is None:
            problems.append(f"{name}: no reference record in {reference_dir} (run with --update once)")
            continue
        if new is None:
            problems.append(f"{name}: the re-run wrote no record")
            continue
        if abs(new["achieved_sparsity"] - ref["achieved_sparsity"]) > 1e-9 or not new["hit_target"]:
            problems.append(
                f"{name}: sparsity {new['achieved_sparsity']:.9f} vs reference {ref['achieved_sparsity']:.9f}"
            )
        for metric in ("top1", "top5"):
            delta = new["metrics"][metric] - ref["metrics"][metric]
            if abs(delta) > tolerance:
                problems.append(
                    f"{name}: {metric} {new['metrics'][metric]:.2f} vs reference "
                    f"{ref['metrics'][metric]:.2f} ({delta:+.2f} > ±{tolerance})"
                )
    return problems


def main(argv=None) -> int:
    p = cli.command_parser("python -m tasks.regression", __doc__)
    p.add_argument("--update", action="store_true", help="rewrite the committed reference records")
    p.add_argument("--tolerance", type=float, default=TOLERANCE)
    args = p.parse_args(argv)
    if args.update:
        run_subset(REFERENCE_DIR)
        print(f"reference records written to {REFERENCE_DIR}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        run_subset(Path(tmp))
        problems = compare(Path(tmp), tolerance=args.tolerance)
        for ref_path, new_path in zip(subset_paths(REFERENCE_DIR), subset_paths(Path(tmp))):
            ref, new = read_record(ref_path), read_record(new_path)
            if ref and new:
                print(
                    f"{ref_path.stem:32s} top-1 {new['metrics']['top1']:6.2f} (reference {ref['metrics']['top1']:6.2f})"
                    f"  top-5 {new['metrics']['top5']:6.2f} ({ref['metrics']['top5']:6.2f})"
                )
    if problems:
        print("REGRESSION:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(f"no regression: {len(subset_paths(REFERENCE_DIR))} cells within ±{args.tolerance} points, same sparsity")
    return 0


if __name__ == "__main__":
    sys.exit(main())
