"""The paper's tables (`python -m tasks.reporting tables`, into results/tables/) from run records, beside the paper's
own numbers: a cell shows the record of the most faithful profile and names it. Reads records, the paper's reference
numbers and, for Table 6 alone, the GPU check's records; runs nothing."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from fcpts.core.io import write_text_atomic
from fcpts.methods.registry import STUDIED_FAMILY
from tasks.grid.layout import extras_with_records, paper_layout, paper_rows, read_reference
from tasks.grid.paths import RESULTS_DIR, RUNS_DIR
from tasks.grid.profiles import paper_profile, pot_methods
from tasks.grid.record_options import same_setup
from tasks.grid.records import PROFILE_PREFERENCE, all_records, cell_key, preferred_records, same_cell_runs
from tasks.reporting import render
from tasks.reporting.drops import drops_table
from tasks.reporting.tables_imagenet import table1, table3, table4
from tasks.reporting.tables_voc import table5 as voc_table5

TABLES = RESULTS_DIR / "tables"
# method_time_<device>.txt (the method-time benchmark on each device), gpu_check_<device>[_<date>]/records
BENCHMARKS = RESULTS_DIR / "benchmarks"
WEIGHTS_DIR = RESULTS_DIR / "weights"
# Table 2's CSV columns, a row a cell with a record
TABLE2_FIELDS = "dataset model method sparsity top1 top5 dense_top1 drop profile paper_top1 paper_top5 record".split()


def training_record(weights_dir: Path, dataset: str, model: str) -> dict | None:
    """The record `tasks.cifar.train` wrote beside a dense model it trained, if any."""
    path = weights_dir / dataset / f"{model}.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def table2(
    records: list[dict],
    reference: list[dict],
    weights_dir: Path = WEIGHTS_DIR,
    record_link: render.RecordLink | None = None,
) -> tuple[str, list[dict]]:
    """Table 2's text and its cells' rows; with `record_link`, each cell's numbers link to its record's page."""
    ref = render.paper_cells(reference, "table2")
    best = {key[1:]: r for key, r in preferred_records(records).items() if key[0] == "cifar"}
    runs = same_cell_runs(records)
    layout = paper_layout(reference, "table2")
    cells = [(ds, sp) for ds in layout.datasets for sp in layout.sparsities]
    extras = extras_with_records(
        lambda m: any((ds, model, m, sp) in best for model in layout.models for ds, sp in cells), "cifar"
    )
    table, rows, trained_notes, cell_records = [], [], {}, []
    beside: list[dict] = []  # records a cell names beside its shown one: their profiles need a legend
    for model in layout.models:
        dense_cells = []
        for ds, _ in cells:
            rec = next((r for k, r in best.items() if k[0] == ds and k[1] == model), None)
            trained = training_record(weights_dir, ds, model)
            p = ref.get((ds, model, "dense", 0.0))
            if rec:
                ours = f"**{rec['dense_metrics']['top1']:.2f}/{rec['dense_metrics']['top5']:.2f}**"
            elif trained:
                ours = f"**{trained['final_test']['top1']:.2f}/{trained['final_test']['top5']:.2f}** (trained here)"
            else:
                ours = "no record"
            if trained:
                trained_notes[(ds, model)] = trained
            dense_cells.append(f"{ours} · {render.paper_numbers(p)}" if p else ours)
        table.append([model, "dense", *dense_cells])
        for method in (*paper_rows(reference, "table2"), *extras):
            out = []
            for ds, sp in cells:
                rec, p = best.get((ds, model, method, sp)), ref.get((ds, model, method, sp))
                note = ""
                if rec is not None:
                    cell_records.append(rec)
                    note, others = beside_the_shown(rec, runs.get(cell_key(rec), []))
                    beside += others
                    m, dense = rec["metrics"], rec["dense_metrics"]["top1"]
                    cell = (ds, model, method, sp, m["top1"], m["top5"], dense, round(dense - m["top1"], 2))
                    paper = (p["top1"], p["top5"]) if p else ("", "")
                    rows.append(dict(zip(TABLE2_FIELDS, (*cell, rec["profile"]["name"], *paper, rec["_path"]))))
                out.append(render.record_cell(rec, record_link, render.paper_numbers(p) if p else "—", note))
            table.append([model, render.row_label(method), *out])
    n_test = sorted({r["metrics"]["n_images"] for r in cell_records if "n_images" in r["metrics"]})
    on = f", on the {' / '.join(f'{n:,}' for n in n_test)} test images" if n_test else ""
    body = render.md_table(["model", "method", *(f"{ds} {int(sp * 100)}%" for ds, sp in cells)], table)
    markers = render.legend(
        [
            *render.cell_markers(
                f"this suite's top-1/top-5 (%) from the cell's record{on}; after `·`: the paper's top-1/top-5 (its "
                "Table 2, transcribed in `results/paper/paper_reference.csv`). Dense rows: the dense model's accuracy "
                "as the records measured it.",
                cell_records,
                beside,
            ),
            f"  - for comparison, {render.paper_protocol()}.",
        ],
        (" seeds: " in body, render.SEED_SPREAD_LEGEND),
        ("(earlier default" in body or "another setup left out" in body, render.EARLIER_DEFAULT_LEGEND),
        (
            " · also " in body,
            "- `also x [profile]`: the same cell and seed under another budget (e.g. POT's cut `paper-cpu` budget "
            "beside its full `paper` one).",
        ),
        (
            "(trained here)" in body,
            "- `(trained here)`: the dense accuracy of a model this suite trained, from its training record "
            "(no sparse record of it yet).",
        ),
        (bool(extras), render.extras_legend("`—` stands after its `·`")),
        ("no record" in body, "- `no record`: no run of this cell is committed."),
    )
    dense_keys = [("cifar10", m, "dense", 0.0) for m in layout.models]
    paper_dense = " / ".join(ref[k]["top1"] for k in dense_keys if k in ref)
    trained_lines = [
        f"- {ds} {model}: {t['final_test']['top1']:.2f}/{t['final_test']['top5']:.2f} after "
        f"{t['recipe']['epochs']} epochs ({t['wall_s'] / 3600:.1f} h on {t['device']}), "
        f"`{t['command'].replace('python -m tasks.train ', 'python -m tasks.cifar.train ', 1)}`"  # renamed since
        for (ds, model), t in sorted(trained_notes.items())
    ]
    text = render.page(
        "Table 2: CIFAR-10/100, top-1/top-5 (%) — ours (this suite's records) vs paper",
        render.CELL_INTRO,
        body,
        markers,
        "\n".join(
            [
                f"Dense CIFAR-10 models are the public akamaster checkpoints (the paper's own: {paper_dense}). "
                "No pretrained CIFAR-100 ResNets exist here, so the suite trains its own with "
                "`python -m tasks.cifar.train` (lower dense accuracy than the paper's; compare drops from dense, "
                "not absolute numbers):",
                *(trained_lines or ["- none trained yet"]),
            ]
        ),
        "Why POT here trails the paper's POT by far more than FCPTS trails the paper's FCPTS (msbench's code read "
        "against this suite's, the paper's full budget, BatchNorm folding, the paper's dense checkpoints): "
        "docs/notebook/pot-vs-msbench.md.",
    )
    return text, rows


def beside_the_shown(shown: dict, runs: list[dict]) -> tuple[str, list[dict]]:
    """What a cell adds after its shown record: ' (earlier default: ...) · 2 seeds of another setup left out · 3 seeds:
    mean ± sd · also x [paper-cpu]' from the cell's `runs`, and the records of its other budgets it names."""
    profile = shown["profile"]["name"]
    text = render.earlier_default_note(shown)
    if left_out := sum(r["profile"]["name"] == profile and not same_setup(r, shown) for r in runs):
        text += f" · {left_out} seed{'s' if left_out > 1 else ''} of another setup left out"
    text += render.seed_spread(shown, runs)
    others = [r for r in runs if r["profile"]["name"] != profile and r.get("seed", 0) == shown.get("seed", 0)]
    for r in sorted(others, key=lambda r: PROFILE_PREFERENCE.index(r["profile"]["name"])):
        text += f" · also {r['metrics']['top1']:.2f} [{r['profile']['name']}]"
    return text, others


def pot_layer_loss(record: dict) -> str:
    """How a POT record computed its layer losses: the layer's forward, or Gram statistics on k of N layers."""
    objectives = [row.get("objective", "forward") for row in record.get("per_layer", []) if "iterations" in row]
    gram = objectives.count("gram")
    return f"Gram on {gram}/{len(objectives)} layers" if gram else "forward"


def gpu_check_records(root: Path = BENCHMARKS) -> list[dict]:
    """The GPU check's records, their profile named after the check's folder (Table 6 only: they are not the
    other tables' cells)."""
    out = []
    for folder in sorted(root.glob("gpu_check_*/records")):
        check = folder.parent.name.removeprefix("gpu_check_")
        for r in all_records(folder):
            out.append({**r, "profile": {**r["profile"], "name": f"{r['profile']['name']} (GPU check {check})"}})
    return out


def time_groups(records: list[dict]) -> dict[tuple, dict[str, dict]]:
    """Table 6's rows: (dataset, model, target, profile) -> method -> seed-0 record, where FCPTS and a POT both ran;
    a `paper` cell may take a `paper-cpu` FCPTS record of the paper's budget (`paper-cpu` cuts POT's alone)."""
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in records:
        if r.get("seed", 0) == 0:  # the seed of Table 2's cells; other seeds' times are not those cells'
            groups[(r["dataset"], r["model"], r["target_sparsity"], r["profile"]["name"])][r["method"]] = r
    for (ds, model, sp, profile), by in list(groups.items()):
        twin = groups.get((ds, model, sp, "paper-cpu"), {}).get(STUDIED_FAMILY)
        if profile == "paper" and STUDIED_FAMILY not in by and twin is not None and has_paper_budget(twin):
            by[STUDIED_FAMILY] = twin
    return {k: by for k, by in sorted(groups.items()) if STUDIED_FAMILY in by and set(pot_methods()) & set(by)}


def has_paper_budget(record: dict) -> bool:
    """The record's method ran with the `paper` profile's budget (images, iterations, batch, no overrides)."""
    paper, budget = paper_profile(), record.get("budget", {})
    same_loop = (budget.get("iterations"), budget.get("batch_size")) == (paper.iterations, paper.batch_size)
    images = record.get("calibration", {}).get("n_images")
    return same_loop and not budget.get("options") and images == paper.n_calibration


def table6(records: list[dict], reference: list[dict], method_times: dict[str, str] | None = None) -> str:
    """Table 6 from the records' wall times; below it, the method-time benchmark's equal-load ratios (file name ->
    text) where methods beyond the paper are shown."""
    groups = time_groups(records)
    extras = extras_with_records(lambda m: any(m in by for by in groups.values()))
    timed = (*paper_rows(reference, "table6"), *extras)  # POT (both allocations), FCPTS: the paper's columns
    pots = pot_methods()
    table = []
    for (ds, model, sp, prof), by in groups.items():
        t = {m: by[m]["wall_s"] / 60 for m in by}
        if by[STUDIED_FAMILY]["profile"]["name"] != prof:  # FCPTS's record from another profile of the same budget
            prof = f"{prof} (FCPTS: {by[STUDIED_FAMILY]['profile']['name']}, the same budget)"
        pot = [t[m] for m in pots if m in t]
        ratio = f"{t[STUDIED_FAMILY] / (sum(pot) / len(pot)):.2f}"
        loss = "; ".join(sorted({pot_layer_loss(by[m]) for m in pots if m in by}))
        devices = "; ".join(sorted({by[m]["device"] for m in timed if m in by}))
        table.append(
            [ds, model, f"{sp:.0%}", prof, *(f"{t[m]:.1f}" if m in t else "—" for m in timed), ratio, loss, devices]
        )
    header = ["dataset", "model", "sparsity", "profile", "POT (L2Norm) min", "POT (ERK) min", "FCPTS min"]
    header += [*(f"{render.row_label(m)} min" for m in extras), "FCPTS / POT", "POT layer loss", "device"]
    quoted = (method_times or {}) if extras else {}  # the ratios concern the methods beyond the paper
    cut = next((r for r in records if r["profile"]["name"] == "paper-cpu" and r["method"] in pots), None)
    full = paper_profile().methods[cut["method"]] if cut else {}  # POT's budget in the paper's protocol
    return render.page(
        "Table 6: time to produce a sparse model (POT vs FCPTS), same machine, same cell",
        render.md_table(header, table, "llll" + "r" * (len(timed) + 1)),
        "Paper (one RTX 3090): "
        + "; ".join(
            f"{r['method'].upper()} {r['dataset']} {r['model']} {r['note'].split('=')[1]} min"
            for r in reference
            if r["table"] == "table6"
        ),
        "Times are the method's own wall-clock time from its record; runs that shared the CPU with other "
        "jobs are slower than they would be alone (records name the device and thread count), and a row whose "
        "device column names two processors compares runs on different machines. "
        + (
            f"The `paper-cpu` profile cuts POT to {cut['budget']['options']['iterations']:,} of its "
            f"{full['options']['iterations']:,} iterations per layer and {cut['calibration']['n_images']:,} of its "
            f"{full['n_calibration']:,} images, so its POT times are far below the paper protocol's. "
            if cut
            else ""
        )
        + "Only `paper` rows measure the paper's comparison. "
        + (
            "A `(GPU check ...)` row is the GPU check's (results/benchmarks/gpu_check_*/records): the paper's "
            "budget on the check's own, smaller data (docs/notebook/benchmarks.md). "
            if any("(GPU check" in profile for *_, profile in groups)
            else ""
        )
        + "POT layer loss: POT's per-layer squared error computed through the layer's forward, or from Gram "
        "statistics of its inputs where that is estimated cheaper (same loss and batches, see "
        "baselines/pot_objective.py); rows with different entries are not a like-for-like time comparison.",
        render.extras_legend("no paper time is quoted for it, and its column is left out of the FCPTS / POT ratio")
        if extras
        else "",
        *(
            "Under equal load: whole runs of FCPTS and the methods beyond the paper alternating in one process "
            f"(the retired `git show 98f744e:benchmarks/speed/method_time.py`, {name}):\n\n```\n"
            + "\n".join(ln for i, ln in enumerate(text.splitlines()) if not i or "ratio to " in ln)
            + "\n```"
            for name, text in quoted.items()
        ),
    )


def render_tables(
    records: list[dict],
    reference: list[dict],
    weights_dir: Path = WEIGHTS_DIR,
    record_link: render.RecordLink | None = None,
) -> dict[str, str]:
    """Every table file's name -> its text; `record_link` links the cells of Tables 1 to 5 (the results site);
    the GPU check's records join Table 6 alone."""
    md, rows = table2(records, reference, weights_dir, record_link)
    out = {"table2_cifar.md": md}
    out["table2_cifar.csv"] = render.csv_text(TABLE2_FIELDS, rows)
    tex = [
        f"{r['dataset']} & {r['model']} & {r['method']} & {r['sparsity']:.1f} & {r['top1']:.2f} & "
        f"{r['top5']:.2f} & {r['paper_top1']} & {r['profile']} \\\\"
        for r in rows
    ]
    head = "dataset & model & method & sparsity & top-1 & top-5 & paper top-1 & profile \\\\"
    out["table2_cifar.tex"] = "\n".join(["\\begin{tabular}{llllrrrr}", head, "\\hline", *tex, "\\end{tabular}", ""])
    method_times = {
        f"results/{f.relative_to(RESULTS_DIR)}": f.read_text() for f in sorted(BENCHMARKS.glob("method_time_*.txt"))
    }
    out["table6_time.md"] = table6([*records, *gpu_check_records()], reference, method_times)
    out["drops_vs_paper.md"] = drops_table(rows, reference, same_cell_runs(records))
    out["table3_imagenet_cnn.md"] = table3(records, reference, record_link=record_link)
    out["table4_imagenet_vit.md"] = table4(records, reference, record_link=record_link)
    out["table1_learned_masks.md"] = table1(records, reference, record_link=record_link)
    out["table5_voc.md"] = voc_table5(records, reference, record_link)
    return out


def write_tables(runs_dir: Path = RUNS_DIR, out_dir: Path = TABLES, weights_dir: Path = WEIGHTS_DIR) -> list[Path]:
    tables = render_tables(all_records(runs_dir), read_reference(), weights_dir)
    for name, text in tables.items():
        write_text_atomic(out_dir / name, text)
    return [out_dir / name for name in tables]
