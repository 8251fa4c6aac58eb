"""Which methods a grid's `--all-methods` runs and a table or figure shows, from the paper's reference numbers (its
rows, in its order) and the method registry (the rows beyond the paper): no method is named here."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fcpts.methods import NOT_IN_PAPER, PAPER_METHOD, get_method, list_methods
from fcpts.methods.registry import FEATURES
from tasks.grid.paths import RESULTS_DIR

REFERENCE = RESULTS_DIR / "paper" / "paper_reference.csv"
DENSE = "dense"  # the reference's row of the dense model, not a method


def read_reference(path: Path = REFERENCE) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


@dataclass(frozen=True)
class PaperLayout:
    """The datasets, models and sparsities of one of the paper's tables: its rows and columns."""

    datasets: tuple[str, ...]
    models: tuple[str, ...]
    sparsities: tuple[float, ...]


def paper_layout(reference: list[dict], table: str) -> PaperLayout:
    """`table`'s datasets and models in the paper's order, the sparsities of its sparse rows ascending."""
    rows = [r for r in reference if r["table"] == table]
    return PaperLayout(
        tuple(dict.fromkeys(r["dataset"] for r in rows)),
        tuple(dict.fromkeys(r["model"] for r in rows)),
        tuple(sorted({float(r["sparsity"]) for r in rows if r["method"] != DENSE})),
    )


def paper_rows(reference: list[dict], table: str) -> list[str]:
    """The methods of one of the paper's tables in its order; a family reported as one row stands for its entries."""
    rows = dict.fromkeys(r["method"] for r in reference if r["table"] == table and r["method"] != DENSE)
    names = set(list_methods())
    return [m for name in rows for m in ([name] if name in names else list_methods(family=name))]


@dataclass(frozen=True)
class MethodSet:
    """What `--all-methods` runs: a paper table's methods, then (unless not `extras`) the extras its models admit."""

    table: str  # the paper's table whose rows are this grid's paper set
    features: frozenset[str] = frozenset()  # what the grid's models have (registry FEATURES)
    extras: bool = True

    def __post_init__(self) -> None:
        unknown = sorted(self.features - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown feature {', '.join(unknown)}; features: {', '.join(FEATURES)}")


# The grids and the paper's table each reproduces; VOC runs no extras (its cells are the suite's costliest).
METHOD_SETS = {
    "cifar": MethodSet("table2", frozenset({"batchnorm"})),
    "imagenet-cnn": MethodSet("table3", frozenset({"batchnorm"})),
    "imagenet-vit": MethodSet("table4"),
    "voc": MethodSet("table5", frozenset({"batchnorm"}), extras=False),
}


def all_methods(grid: str) -> list[str]:
    """`--all-methods` of `grid` (a METHOD_SETS key) in registry order: the paper's set, then the extras."""
    if grid not in METHOD_SETS:
        raise ValueError(f"unknown method set {grid!r}; sets: {', '.join(METHOD_SETS)}")
    spec = METHOD_SETS[grid]
    paper = set(paper_rows(read_reference(), spec.table))
    extras = set(extra_methods(grid)) if spec.extras else set()
    return [m for m in list_methods() if m in paper or m in extras]


def extra_methods(grid: str | None = None) -> list[str]:
    """The methods beyond the paper that `--all-methods` runs (on `grid`, or any grid), in registry order."""
    sets = [METHOD_SETS[grid]] if grid is not None else [s for s in METHOD_SETS.values() if s.extras]
    return [
        m
        for m in list_methods(role=NOT_IN_PAPER, ablation=False)
        if any(s.extras and set(get_method(m).requires) <= s.features for s in sets)
    ]


def extras_with_records(has_record: Callable[[str], bool], task: str | None = None) -> list[str]:
    """The extras with records: a table gains rows for these only."""
    return [m for m in extra_methods(task) if has_record(m)]


def compared_methods(reference: list[dict]) -> list[str]:
    """Every method the paper's tables compare, then the extras: Figure 1's lines, the paper's method first."""
    in_paper = {m for table in {r["table"] for r in reference} for m in paper_rows(reference, table)}
    methods = [m for m in list_methods() if m in in_paper or m in extra_methods()]
    return sorted(methods, key=lambda m: get_method(m).role != PAPER_METHOD)  # stable: registry order otherwise
