"""The one renderer of the generated tables: a table file's page, its Markdown table, its record cells ("ours ·
paper") and the legend of their markers, written from the records a table shows (so it never disagrees with them).
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from fcpts.methods import get_method, label
from tasks.grid.layout import extra_methods, read_reference
from tasks.grid.paths import RESULTS_DIR
from tasks.grid.profiles import paper_profile, pot_methods
from tasks.grid.record_options import earlier_defaults, same_setup
from tasks.grid.records import PROFILE_PREFERENCE, cell_key

EXTERNAL_REFERENCE = RESULTS_DIR / "paper" / "external_reference.csv"
NOT_IN_PAPER = "(not in the paper)"  # the marker after an extra method's label, in every table and figure
RecordLink = Callable[[dict], str]  # a record -> the URL of its page, for a reader that has one (the results site)


CELL_INTRO = (
    "Each cell: **ours** top-1/top-5 (drop from dense) [profile] · paper top-1/top-5; every marker is explained in "
    "the legend below the table."
)


def page(title: str, *blocks: str) -> str:
    """A table file: its `# title`, then its non-empty blocks (intro, table, legend, notes) a blank line apart."""
    return "\n\n".join((f"# {title}", *(b for b in blocks if b))) + "\n"


def md_table(header: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> str:
    """A Markdown pipe table of its cells' `str()`; `align` has a letter a column, `r` for right-aligned (left where
    not given)."""
    lines = ["| " + " | ".join(map(str, row)) + " |" for row in [header, *rows]]
    lines.insert(1, "|" + "".join("---:|" if a == "r" else "---|" for a in align.ljust(len(header), "l")))
    return "\n".join(lines)


def csv_text(fields: Sequence[str], rows: Iterable[dict]) -> str:
    """A CSV file of `rows` under the header `fields` (other keys of a row left out)."""
    with io.StringIO(newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
        return f.getvalue()


def paper_cells(reference: list[dict], table: str) -> dict[tuple, dict]:
    """(dataset, model, method, sparsity) -> the paper's row of `table` in its reference numbers."""
    return {(r["dataset"], r["model"], r["method"], float(r["sparsity"])): r for r in reference if r["table"] == table}


def paper_numbers(reference_row: dict) -> str:
    """The paper's top-1/top-5 as it printed them."""
    return f"{reference_row['top1']}/{reference_row['top5']}"


def record_cell(
    record: dict | None,
    record_link: RecordLink | None = None,
    paper: str | None = None,
    note: str = "",
    missing: str = "no record",
    metrics: tuple[str, ...] = ("top1", "top5"),
    digits: int = 2,
) -> str:
    """A cell: **ours** (−drop from dense[, reached x]) [profile]`note`, then ` · paper` where a `paper` is given;
    `missing` (then ` · paper`) without a record. With `record_link`, the bold numbers link to the record's page."""
    beside = f" · {paper}" if paper is not None else ""
    if record is None:
        return missing + beside
    m = record["metrics"]
    numbers = "/".join(f"{m[k]:.{digits}f}" for k in metrics)
    drop = record["dense_metrics"][metrics[0]] - m[metrics[0]]
    reached = "" if record.get("hit_target", True) else f", reached {record['achieved_sparsity']:.3f}"
    shown = f"[**{numbers}**]({record_link(record)})" if record_link else f"**{numbers}**"
    return f"{shown} (−{drop:.{digits}f}{reached}) [{record['profile']['name']}]{note}{beside}"


def row_label(method: str) -> str:
    """The label a table row or figure line shows: the registry's, marked for the extras beyond the paper so that
    one is never read as the paper's."""
    return f"{label(method)} {NOT_IN_PAPER}" if method in extra_methods() else label(method)


def extras_legend(paper_number: str) -> str:
    """The legend line for the extras' rows; `paper_number` says what stands where the paper's number would."""
    return (
        f"- `{NOT_IN_PAPER}`: a method beyond the paper's, which `--all-methods` runs beside them (its registry "
        f"record's role); the paper has no number for it, so {paper_number}."
    )


def read_external(path: Path = EXTERNAL_REFERENCE) -> dict[str, str]:
    """key -> value of the external reference data (sources in the file)."""
    return {r["key"]: r["value"] for r in read_reference(path)}


def budget_text(record: dict) -> str:
    """The budget a record's method ran with, in words, from the record's own `budget` and `calibration`."""
    budget = record.get("budget")
    if not budget:
        return "budget not in the record"
    options = dict(budget.get("options") or {})
    n = (record.get("calibration") or {}).get("n_images")
    images = f" on {n:,} calibration images" if n else ""
    method = record["method"]
    if method in pot_methods():
        per_layer = options.pop("iterations", None)
        text = f"{per_layer:,} iterations per layer" if per_layer else "the method's default iterations"
        text += images
    elif get_method(method).trains:
        text = f"{budget['iterations']:,} iterations of {budget['batch_size']}{images}"
        if trials := ((record.get("method_report") or {}).get("extra") or {}).get("trials"):
            text = f"{len(trials)} trials of {text}"
    else:
        text = f"no training{images}"
    extra = ", ".join(
        f"{k} {v}" if not isinstance(v, (list, tuple, dict)) else f"{k}: {len(v)} given"
        for k, v in sorted(options.items())
    )
    return f"{text} ({extra})" if extra else text


def profile_legend(cell_records: list[dict]) -> list[str]:
    """One line per profile tag that appears in a table: what each method's record in it ran with."""
    by_profile: dict[str, dict[str, set[str]]] = {}
    for r in cell_records:
        methods = by_profile.setdefault(r["profile"]["name"], {})
        methods.setdefault(r["method"], set()).add(budget_text(r))
    lines = []
    for name in sorted(by_profile, key=lambda p: (PROFILE_PREFERENCE + (p,)).index(p)):
        texts: dict[str, list[str]] = {}
        for method, budgets in by_profile[name].items():
            texts.setdefault(" / ".join(sorted(budgets)), []).append(label(method))
        parts = [f"{', '.join(methods)}: {text}" for text, methods in texts.items()]
        lines.append(f"  - `[{name}]`: " + "; ".join(parts) + ".")
    return lines


def profile_tag(shown: list[dict]) -> str:
    """The `[profile]` marker's legend, saying how a cell chose among the profiles that appear, if several."""
    present = [p for p in PROFILE_PREFERENCE if p in {r["profile"]["name"] for r in shown}]
    chose = f" (a cell shows its most faithful record: {' before '.join(f'`{p}`' for p in present)})"
    return f"`[profile]`: the budget the cell's record ran with{chose if len(present) > 1 else ''}:"


def cell_markers(bold: str, shown: list[dict], beside: list[dict] | None = None) -> list[str]:
    """The legend lines of record cells: their **bold** numbers (`bold`), drop, sparsity reached where missed, and
    the budgets behind the profile tags of the `shown` records and those `beside` them."""
    lines = [
        f"- **bold**: {bold}",
        "- `(−x.xx)`: drop from dense, in points: the record's dense top-1 minus its sparse top-1.",
    ]
    if any(not r.get("hit_target", True) for r in shown):
        lines.append(
            "- `reached x`: the sparsity the run reached where it missed the target (STR cannot be aimed: it searches "
            "its threshold decay and keeps the trial nearest to the target)."
        )
    return [*lines, f"- {profile_tag(shown)}", *profile_legend(shown + (beside or []))]


def legend(head: list[str], *markers: tuple[bool, str]) -> str:
    """A table's legend: its `head` lines, then the line of each marker the table shows (`(shown, line)`)."""
    return "\n".join(["Legend:", *head, *(line for shown, line in markers if shown)])


def paper_protocol() -> str:
    """The paper's protocol as the `paper` profile defines it (tasks/grid/profiles.py)."""
    p = paper_profile()
    pot = p.methods[pot_methods()[0]]
    return (
        f"the paper's protocol (profile `paper`) gives the training-loop methods {p.iterations:,} iterations of "
        f"{p.batch_size} on {p.n_calibration:,} calibration images and POT {pot['options']['iterations']:,} "
        f"iterations per layer on {pot['n_calibration']:,} images (capped at the split's size)"
    )


SEED_SPREAD_LEGEND = (
    "- `n seeds: mean ± sd`: top-1 over the seeds that ran the cell under the shown profile and options (seed 0 "
    "is the bold value); sd is the sample standard deviation. A seed draws other calibration images and batches."
)
EARLIER_DEFAULT_LEGEND = (
    "- `(earlier default: option value)`: the record ran with a default of its method that has changed since (the "
    "method's docstring says why); a record made with today's defaults replaces it when one is committed. `n "
    "seeds of another setup left out`: records of the cell and profile that ran other options (an earlier default) "
    "than the shown one, not counted in its spread."
)


def seeds_of(shown: dict, records: list[dict]) -> list[dict]:
    """The records of the shown record's cell under its profile and options: its seeds, itself included (a seed
    run with a default changed since is not one of them)."""
    return [r for r in records if cell_key(r) == cell_key(shown) and same_setup(r, shown)]


def earlier_default_note(record: dict) -> str:
    """' (earlier default: ramp 0.5)' for a record run with a default changed since; else ''."""
    changed = earlier_defaults(record)
    return f" (earlier default: {', '.join(f'{k} {v}' for k, v in changed.items())})" if changed else ""


def seed_spread(shown: dict, records: list[dict]) -> str:
    """' · n seeds: mean ± sd' of top-1 over the records of the shown record's cell and profile, when more
    than one seed ran it; else ''."""
    same = seeds_of(shown, records)
    return f" · {len(same)} seeds: {mean_sd([r['metrics']['top1'] for r in same])}" if len(same) > 1 else ""


def mean_sd(values: list[float]) -> str:
    """'mean ± sample sd' of several values, two decimals; the value alone for one."""
    sd = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.2f}{sd}"
