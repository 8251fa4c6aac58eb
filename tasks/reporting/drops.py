"""Drops from dense on Table 2's 80% and 90% cells: this suite's FCPTS and its variants against the paper's FCPTS,
with the seeds' spread and a verdict that says what it rests on (docs/notebook/results.md quotes this table)."""

from __future__ import annotations

import statistics

from fcpts.methods import get_method, label
from fcpts.methods.registry import STUDIED_FAMILY
from tasks.grid.layout import extra_methods, paper_layout
from tasks.reporting import render

SPARSITIES = (0.8, 0.9)  # of Table 2's: where the methods part
DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}


def against_paper(drops: list[float], paper: float) -> str:
    """Within noise of the paper's drop (several seeds whose range holds it), or short of it / meeting it, saying
    whether that rests on one seed or on several all on that side."""
    gap = round(statistics.mean(drops) - paper, 2)
    if len(drops) > 1 and min(drops) <= paper <= max(drops):
        return f"within noise of the paper ({gap:+.2f})"
    side = "short" if gap > 0 else "better"
    verdict = f"{gap:.2f} short" if gap > 0 else f"met ({abs(gap):.2f} better)"
    seeds = {1: "1 seed", 2: f"both seeds {side}"}.get(len(drops), f"all {len(drops)} seeds {side}")
    return f"{verdict}, {seeds}"


def drops_table(table2_rows: list[dict], reference: list[dict], runs: dict[tuple, list[dict]]) -> str:
    """Per 80/90% cell, the paper's FCPTS drop and ours (FCPTS, then this suite's variants of it), each against the
    paper's; `runs`: cell_key -> every record of the cell (all seeds), for the spread."""
    shown = {(r["dataset"], r["model"], r["method"], r["sparsity"]): r for r in table2_rows}
    table, layout = render.paper_cells(reference, "table2"), paper_layout(reference, "table2")
    methods = [STUDIED_FAMILY, *(m for m in extra_methods("cifar") if get_method(m).family == STUDIED_FAMILY)]
    names = [label(m).split(" (")[0] for m in methods]  # header names; the intro line says whose each is
    body = []
    for ds, model in ((ds, model) for ds in layout.datasets for model in layout.models):
        dense = table.get((ds, model, "dense", 0.0))
        for sp in SPARSITIES:
            sparse = table.get((ds, model, STUDIED_FAMILY, sp))
            ref = float(dense["top1"]) - float(sparse["top1"]) if dense and sparse else None  # the paper's FCPTS drop
            our_dense = {r["dense_top1"] for (d, m, _, s), r in shown.items() if (d, m, s) == (ds, model, sp)}
            # Our dense top-1 minus the paper's: the drops are measured from different models.
            versus = f"{our_dense.pop() - float(dense['top1']):+.2f}" if dense and len(our_dense) == 1 else "—"
            cells = [f"{ref:.2f}" if ref is not None else "—", versus]
            for method in methods:
                row = shown.get((ds, model, method, sp))
                if row is None:
                    cells += ["no record", "—"]
                    continue
                cell = runs[("cifar", ds, model, method, round(sp, 4))]
                shown_rec = next(r for r in cell if r["_path"] == row["record"])  # the record Table 2 shows
                drops = [r["dense_metrics"]["top1"] - r["metrics"]["top1"] for r in render.seeds_of(shown_rec, cell)]
                # ours: '1.85 ± 0.10 (3 seeds, 1.74-1.93) [paper-cpu]', every seed of the shown record's setup
                seeds = f" ({len(drops)} seeds, {min(drops):.2f}-{max(drops):.2f})" if len(drops) > 1 else ""
                ours = f"{render.mean_sd(drops)}{seeds} [{row['profile']}]" + render.earlier_default_note(shown_rec)
                cells += [ours, against_paper(drops, ref) if ref is not None else "—"]
            body.append([f"{DATASET_NAMES[ds]} {model} {sp:.0%}", *cells])
    header = ["cell", "paper FCPTS", "dense, ours − paper", *(c for n in names for c in (n, f"{n} vs paper"))]
    markdown = render.md_table(header, body, "lrr" + "rl" * len(names))
    return render.page(
        "Drop from dense on Table 2's 80% and 90% cells: this suite's FCPTS and FCPTS+ vs the paper's FCPTS",
        "Top-1 points lost from each one's own dense model (the paper's: its Table 2; ours: every seed of the "
        "record Table 2 shows, with its profile). FCPTS+ is this "
        "suite's improved method, not in the paper. `dense, ours − paper`: our dense model's top-1 minus the paper's "
        "(the drops are measured from different models). Several seeds: mean ± sample standard deviation, then the "
        "seeds' range. Each `vs paper` column compares the mean drop with the paper's FCPTS drop: `within noise of "
        "the paper` when the paper's drop lies inside the seeds' range (the signed difference after it), else how far "
        "short of it or better, and whether that rests on one seed or on several, all on that side.",
        markdown,
        render.EARLIER_DEFAULT_LEGEND.removeprefix("- ") if "(earlier default" in markdown else "",
    )
