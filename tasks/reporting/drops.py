"""Where this suite's FCPTS and its improved method stand against the paper's FCPTS on Table 2's 80% and 90%
cells, compared as drops from dense (the dense models are not the paper's: its CIFAR-10 checkpoints are
another family, its CIFAR-100 ones are not public), one line per cell; docs/notebook/results.md quotes this table.

Built from Table 2's rows (the records each cell shows) and the paper's Table 2 (reference data)."""

from __future__ import annotations

from fcpts.methods import label

SPARSITIES = (0.8, 0.9)
FAITHFUL, IMPROVED = "fcpts", "fcpts-plus"
CELLS = [(ds, model) for ds in ("cifar10", "cifar100") for model in ("resnet32", "resnet56")]
DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}


def paper_drops(reference: list[dict]) -> dict[tuple, float]:
    """(dataset, model, sparsity) -> the paper's FCPTS drop from its own dense model (points)."""
    table = {
        (r["dataset"], r["model"], r["method"], float(r["sparsity"])): r for r in reference if r["table"] == "table2"
    }
    drops = {}
    for ds, model in CELLS:
        dense = table.get((ds, model, "dense", 0.0))
        for sp in SPARSITIES:
            sparse = table.get((ds, model, FAITHFUL, sp))
            if dense and sparse:
                drops[(ds, model, sp)] = float(dense["top1"]) - float(sparse["top1"])
    return drops


def against_paper(ours: float, paper: float) -> str:
    """How a drop compares with the paper's: short of it by x points, or at/below it."""
    gap = round(ours - paper, 2)
    return f"{gap:.2f} short" if gap > 0 else f"met ({abs(gap):.2f} better)"


def drops_table(table2_rows: list[dict], reference: list[dict]) -> str:
    """Markdown: per 80/90% cell, the paper's FCPTS drop and ours (faithful, improved), and the improved
    method's distance to the paper's drop; `no record` where a cell has not run."""
    ours = {(r["dataset"], r["model"], r["method"], r["sparsity"]): r for r in table2_rows}
    paper = paper_drops(reference)
    improved = label(IMPROVED).split(" (")[0]  # the header's short name; the intro line says whose it is
    lines = [
        "# Drop from dense on Table 2's 80% and 90% cells: this suite's FCPTS and FCPTS+ vs the paper's FCPTS",
        "",
        "Top-1 points lost from each one's own dense model (the paper's: its Table 2; ours: the record Table 2 "
        "shows, with its profile). FCPTS+ is this suite's improved method, not in the paper; the last column is "
        "its drop against the paper's FCPTS drop.",
        "",
        f"| cell | paper FCPTS | FCPTS (ours) | {improved} | {improved} vs paper |",
        "|---|---:|---:|---:|---|",
    ]
    for ds, model in CELLS:
        for sp in SPARSITIES:
            ref = paper.get((ds, model, sp))
            faithful, better = ours.get((ds, model, FAITHFUL, sp)), ours.get((ds, model, IMPROVED, sp))
            cells = [
                f"{ref:.2f}" if ref is not None else "—",
                f"{faithful['drop']:.2f} [{faithful['profile']}]" if faithful else "no record",
                f"{better['drop']:.2f} [{better['profile']}]" if better else "no record",
                against_paper(better["drop"], ref) if better and ref is not None else "—",
            ]
            lines.append(f"| {DATASET_NAMES[ds]} {model} {sp:.0%} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
