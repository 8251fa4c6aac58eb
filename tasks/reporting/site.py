"""The results explorer: a static site of every table, figure and run, opened from disk (no server, no network).

    python -m tasks.reporting site                 # writes results/site/ (index.html, runs/*.html, records.csv)

The tables are those `python -m tasks.reporting tables` writes, rendered from the same records; every record gets
a page (curves, per-layer sparsity, provenance). Record text never becomes a link of another scheme than http(s) or
a relative path, and no page shows a machine's absolute path. Runs nothing.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import time
import types
from itertools import takewhile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from fcpts.core.io import write_text_atomic
from fcpts.methods import label
from tasks.grid.layout import read_reference
from tasks.grid.paths import REPO_ROOT, RESULTS_DIR, RUNS_DIR, repo_relative
from tasks.grid.records import all_records, headline
from tasks.reporting.figures import FIGURES_DIR
from tasks.reporting.paper import TABLES, render_tables
from tasks.reporting.render import csv_text

SITE_DIR = RESULTS_DIR / "site"
# Tables made elsewhere than from records (the deploy benchmark's), shown as committed.
COMMITTED_TABLES = ("table7_inference.md",)

# The pages' style and script (a header click sorts a table, grouped rows within their group; the runs table
# filters on the words typed), inlined into every page so it opens from disk.
CSS = Path(__file__).with_name("site.css").read_text()
PAGE_JS = Path(__file__).with_name("site.js").read_text()


# An absolute path in a page's text: at its start or after a space, bracket, quote (escaped: `;`), `=`, `,` or `>`.
ABSOLUTE_PATH = re.compile(r"(?<![^\s(\['\"=,;>])(?:/[\w.+~@-]+)+/?")


def without_machine_paths(text: str) -> str:
    """`text` with each absolute path made relative to the checkout, or outside it shortened to `…/` and its name."""

    def shown(m: re.Match) -> str:
        path = Path(m.group(0))
        return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else f"…/{path.name}"

    return ABSOLUTE_PATH.sub(shown, text)


def page(title: str, body: str, root: str = "") -> str:
    """One HTML page: inline style and script (no fetch but its own images), no machine's absolute path."""
    title, body = without_machine_paths(title), without_machine_paths(body)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<link rel='icon' href='data:,'>"  # no favicon request
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n"
        f"<nav><a href='{root}index.html'>FCPTS results</a><a href='{root}index.html#tables'>tables</a>"
        f"<a href='{root}index.html#figures'>figures</a><a href='{root}index.html#runs'>runs</a>"
        f"<a href='{root}records.csv'>records.csv</a></nav>\n{body}\n<script>{PAGE_JS}</script></body></html>\n"
    )


# --- Markdown: the subset the generated tables use, rendered as the tables' own sort and links need it.


def followable(url: str) -> bool:
    """Whether a link may point at `url`: http(s) or a relative path (a record's text could hold `javascript:`)."""
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):  # browsers drop these before reading the scheme
        return False
    scheme = re.match(r"([^/?#]*):", url)
    return scheme is None or scheme.group(1).lower() in ("http", "https")


def inline(text: str) -> str:
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)

    def anchor(m: re.Match) -> str:
        url = html.unescape(m.group(2))
        url = f"#{url[:-3]}" if re.fullmatch(r"[\w.-]+\.md", url) else url  # another table: its section of the index
        return f"<a href='{html.escape(url)}'>{m.group(1)}</a>" if followable(url) else m.group(0)

    return re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", anchor, out)


def sortable(attributes: str, head: str, body: str) -> str:
    """A table that sorts on a header click (PAGE_JS), scrolling sideways where wide."""
    return (
        f"<div class='scroll'><table class='sortable'{attributes}><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></div>"
    )


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def row_groups(titles: list[str], rows: list[list[str]]) -> tuple[int, list[int]]:
    """A table's leading columns up to its model column and each row's group; a blank cell repeats the one above."""
    columns = next((n + 1 for n, title in enumerate(titles) if title.startswith("model")), 0)
    seen: dict[tuple, int] = {}
    lead: list[str] = [""] * columns
    groups = []
    for cells in rows:
        lead = [cell or above for cell, above in zip(cells[:columns], lead)]
        groups.append(seen.setdefault(tuple(lead), len(seen)))
    return columns, groups


def markdown_to_html(md: str) -> str:
    lines, out, i = md.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("```")), len(lines))
            out.append("<pre>" + html.escape("\n".join(lines[i + 1 : j])) + "</pre>")
            i = j + 1
        elif m := re.match(r"(#{1,4}) (.*)", line):
            level = len(m.group(1)) + 1  # the page's own title is the h1
            out.append(f"<h{level}>{inline(m.group(2))}</h{level}>")
            i += 1
        elif line.startswith("|") and i + 1 < len(lines) and re.match(r"\|[\s:|-]+\|?$", lines[i + 1]):
            titles = _cells(line)
            head = "".join(f"<th>{inline(c)}</th>" for c in titles)
            body = [_cells(row) for row in takewhile(lambda row: row.startswith("|"), lines[i + 2 :])]
            i += 2 + len(body)
            columns, groups = row_groups(titles, body)
            rows = [
                f"<tr data-group='{g}'>" + "".join(f"<td>{inline(c)}</td>" for c in cells) + "</tr>"
                for g, cells in zip(groups, body)
            ]
            out.append(sortable(f" data-group-columns='{columns}'", head, "".join(rows)))
        elif re.match(r"\s*- ", line):
            items = list(takewhile(lambda item: re.match(r"\s*- ", item), lines[i:]))
            i += len(items)
            depths = [item.index("-") // 2 for item in items]  # two spaces a level
            out.append(
                "<ul>"
                + "".join(
                    f"<li style='margin-left:{1.5 * d}em'>{inline(t.strip()[2:])}</li>" for d, t in zip(depths, items)
                )
                + "</ul>"
            )
        elif line.strip():
            para = [
                line,
                *takewhile(lambda next_: next_.strip() and not re.match(r"(#|\||```|\s*- )", next_), lines[i + 1 :]),
            ]
            i += len(para)
            out.append(f"<p>{inline(' '.join(para))}</p>")
        else:
            i += 1
    return "\n".join(out)


# --- The index of all records (records.csv and the runs table)


def run_slug(record: dict) -> str:
    return record["_path"].removesuffix(".json").replace("/", "--")


def paper_numbers(reference: list[dict]) -> dict[tuple, dict]:
    """(dataset, model, method, sparsity) -> the paper's row; its main tables before Table 1, which repeats some."""
    out: dict[tuple, dict] = {}
    for r in sorted(reference, key=lambda r: r["table"] == "table1"):
        if r["top1"] and r["sparsity"]:
            out.setdefault((r["dataset"], r["model"], r["method"], round(float(r["sparsity"]), 4)), r)
    return out


INDEX_FIELDS = (
    "record task dataset model method target achieved hit_target metric ours top5 dense drop paper paper_drop "
    "profile seed wall_min device created git_commit"
).split()


def index_row(record: dict, paper: dict[tuple, dict]) -> dict:
    name, value = headline(record)
    dense = record["dense_metrics"].get(name)
    ref = paper.get((record["dataset"], record["model"], record["method"], round(record["target_sparsity"], 4)))
    ref_dense = paper.get((record["dataset"], record["model"], "dense", 0.0)) if ref else None
    return {
        "record": record["_path"],
        **{key: record[key] for key in ("task", "dataset", "model", "method")},
        "target": record["target_sparsity"],
        "achieved": round(record["achieved_sparsity"], 6),
        "hit_target": record.get("hit_target"),
        "metric": name,
        "ours": value,
        "top5": record["metrics"].get("top5", ""),
        "dense": dense,
        "drop": round(dense - value, 2) if dense is not None else "",
        "paper": ref["top1"] if ref else "",
        "paper_drop": round(float(ref_dense["top1"]) - float(ref["top1"]), 2) if ref and ref_dense else "",
        "profile": record["profile"]["name"],
        "seed": record.get("seed", 0),
        "wall_min": round(record["wall_s"] / 60, 2),
        **{key: record.get(key, "") for key in ("device", "created", "git_commit")},
    }


def runs_table(rows: list[dict]) -> str:
    shown = [f for f in INDEX_FIELDS if f not in ("record", "device", "created", "git_commit")]
    head = "<th>run</th>" + "".join(f"<th>{f}</th>" for f in shown)
    body = "".join(
        f"<tr><td><a href='runs/{html.escape(r['slug'])}.html'>{html.escape(r['record'])}</a></td>"
        + "".join(f"<td>{html.escape(str(r[f]))}</td>" for f in shown)
        + "</tr>"
        for r in rows
    )
    return sortable(" id='runs-table'", head, body)


# --- One page per run


def plot_inputs(record: dict) -> dict:
    """All of a record that its run plot draws."""
    return {
        "history": (record.get("method_report") or {}).get("history_every_10") or [],
        "layer_sparsity": [layer["sparsity"] for layer in record.get("per_layer") or []],
        "target": record["target_sparsity"],
    }


def plot_name(record: dict) -> str:
    """The run's slug and a hash of what its plot draws and of the code that draws it: a rebuild redraws only
    the plots whose picture changes."""
    drawn = json.dumps(plot_inputs(record), sort_keys=True) + PLOT_CODE
    return f"{run_slug(record)}.{hashlib.sha256(drawn.encode()).hexdigest()[:12]}.png"


def draw_run_plot(inputs: dict, out: Path) -> Path:
    """The run's loss and sparsity curves (when its method keeps a step history) and its per-layer sparsity."""
    history, layers, target = inputs["history"], inputs["layer_sparsity"], inputs["target"]
    curves = [k for k in ("loss", "sparsity") if any(k in h for h in history)]
    n = len(curves) + 1
    fig, axes = plt.subplots(1, n, figsize=(4.2 * (n - 1) + 7.0, 3.4), squeeze=False, width_ratios=[3] * (n - 1) + [5])
    for ax, key in zip(axes[0], curves):
        pts = [(h["step"], h[key]) for h in history if key in h]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color="tab:red", linewidth=1.2)
        if key == "loss" and min(p[1] for p in pts) > 0:
            ax.set_yscale("log")
        if key == "sparsity":
            ax.axhline(target, color="gray", linestyle="--", linewidth=0.8, label="target")
            ax.legend(fontsize=8)
        ax.set_xlabel("step")
        ax.set_title(f"{key} (every 10th step)", fontsize=10)
        ax.grid(alpha=0.3)
    ax = axes[0][-1]
    ax.bar(range(len(layers)), [100 * sparsity for sparsity in layers], color="tab:blue", width=0.85)
    ax.axhline(100 * target, color="gray", linestyle="--", linewidth=0.8)
    ax.set_ylim(0, 102)
    ax.set_xlabel(f"layer (network order, {len(layers)} layers)")
    ax.set_ylabel("layer sparsity (%)")
    ax.set_title("per-layer sparsity (dashed: global target)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.tmp")  # an interrupted build leaves no plot under a valid name
    fig.savefig(partial, dpi=80, format="png")
    plt.close(fig)
    return partial.replace(out)


def code_key(code: types.CodeType) -> str:
    """What a function computes, not where it stands in its file: its bytecode, names and constants."""
    consts = [code_key(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return repr((code.co_code, code.co_names, code.co_varnames, consts))


# What a plot's picture depends on besides its inputs: the code that draws it and matplotlib's version.
PLOT_CODE = code_key(draw_run_plot.__code__) + matplotlib.__version__


def _definition_list(items: dict) -> str:
    rows = "".join(
        f"<tr><th scope='row'>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in items.items()
    )
    return f"<table>{rows}</table>"


def run_page(record: dict, row: dict, plot: str) -> str:
    name, value = headline(record)
    calibration = {k: v for k, v in (record.get("calibration") or {}).items() if not isinstance(v, list)}
    provenance = {
        "record": f"results/runs/{record['_path']}",
        **{key: record.get(key.replace(" ", "_"), "") for key in ("command", "git commit", "created", "device")},
        "environment": ", ".join(f"{k} {v}" for k, v in (record.get("environment") or {}).items()),
        "dense weights": (record.get("weights") or {}).get("sha256", ""),
        "mask sha256": record.get("mask_sha256", ""),
        "calibration": ", ".join(f"{k} {v}" for k, v in calibration.items()),
        "profile": f"{record['profile']['name']}: {record['profile'].get('note', '')}",
        "wall time": f"{record['wall_s']:.0f} s (evaluation {record.get('eval_s', 0):.0f} s)",
    }
    if record.get("provenance_note"):
        provenance["note"] = record["provenance_note"]
    summary = {
        "method": label(record["method"]),
        "target / achieved sparsity": f"{record['target_sparsity']:.2%} / {record['achieved_sparsity']:.4%}",
        name: f"{value:.2f} (dense {row['dense']:.2f}, drop {row['drop']:.2f})" if row["dense"] is not None else value,
        **({"top-5": record["metrics"]["top5"]} if "top5" in record["metrics"] else {}),
        "paper": f"{row['paper']} (drop {row['paper_drop']:.2f})" if row["paper_drop"] != "" else row["paper"] or "—",
    }
    layers = record.get("per_layer") or []

    def _short(v) -> str:
        return f"{v:.6g}" if isinstance(v, float) else str(v)

    keys = list(dict.fromkeys(k for layer in layers for k in layer))
    layer_rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_short(layer.get(k, '')))}</td>" for k in keys) + "</tr>"
        for layer in layers
    )
    history = (record.get("method_report") or {}).get("history_every_10") or []
    no_curve = "" if history else "<p class='muted'>This method keeps no step history: no loss curve.</p>"
    title = f"{record['model']} on {record['dataset']}: {label(record['method'])} at {record['target_sparsity']:.0%}"
    body = (
        f"<h1>{html.escape(title)}</h1>{_definition_list(summary)}"
        f"<h2>Curves and allocation</h2>{no_curve}<img id='run-plot' src='{html.escape(plot)}' alt='run plot'>"
        f"<h2>Provenance</h2>{_definition_list(provenance)}"
        f"<h2>Per layer</h2>{sortable('', ''.join(f'<th>{html.escape(k)}</th>' for k in keys), layer_rows)}"
    )
    return page(title, body, root="../")


# --- The whole site


def build_site(out_dir: Path = SITE_DIR, runs_dir: Path = RUNS_DIR) -> None:
    records, reference = all_records(runs_dir), read_reference()
    plots = clear_but_plots(out_dir)
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    tables = render_tables(records, reference, record_link=lambda r: f"runs/{run_slug(r)}.html")
    for name in COMMITTED_TABLES:
        if (TABLES / name).is_file():
            tables[name] = (TABLES / name).read_text()
    md_tables = sorted((n for n in tables if n.endswith(".md")), key=lambda n: (not n.startswith("table"), n))
    titles = [html.escape(tables[n].splitlines()[0].lstrip("# ")) for n in md_tables]  # each starts "# title"
    toc = "".join(f"<li><a href='#{n[:-3]}'>{title}</a></li>" for n, title in zip(md_tables, titles))
    sections = "".join(f"<section id='{n[:-3]}'>{markdown_to_html(tables[n])}</section><hr>" for n in md_tables)
    (out_dir / "figures").mkdir()
    figures = sorted(FIGURES_DIR.glob("*.png"))
    for f in figures:
        shutil.copyfile(f, out_dir / "figures" / f.name)
    figure_html = "".join(
        f"<figure><img src='figures/{html.escape(f.name)}' alt='{html.escape(f.stem)}' loading='lazy'>"
        f"<figcaption>{html.escape(f.name)}</figcaption></figure>"
        for f in figures
    )
    paper = paper_numbers(reference)
    rows, drawn = [], set()
    for r in records:
        row = {**index_row(r, paper), "slug": run_slug(r)}
        plot = out_dir / "runs" / plot_name(r)
        if plot not in plots:
            draw_run_plot(plot_inputs(r), plot)
        drawn.add(plot)
        write_text_atomic(out_dir / "runs" / f"{row['slug']}.html", run_page(r, row, plot.name))
        rows.append(row)
    write_text_atomic(out_dir / "records.csv", csv_text(INDEX_FIELDS, rows))
    body = (
        "<h1>FCPTS suite: results explorer</h1>"
        f"<p>{len(records)} records from <code>results/runs/</code>, the paper's numbers from "
        "<code>results/paper/paper_reference.csv</code>. Click a column header to sort a table (a paper table "
        "sorts within each model's rows); each run, and each cell of Tables 1-5, links to its page (curves, "
        "per-layer sparsity, provenance). All records: <a href='records.csv'>records.csv</a>.</p>"
        f"<h2 id='tables'>Tables</h2><ul>{toc}</ul>{sections}"
        f"<h2 id='figures'>Figures</h2>{figure_html}"
        f"<h2 id='runs'>Runs</h2><p><input id='runs-filter' type='search' size='40' aria-label='filter the runs' "
        "placeholder='filter: words a run&#x27;s row holds, e.g. resnet56 fcpts'> "
        f"<span id='runs-shown' class='muted'>{len(rows)} runs</span></p>{runs_table(rows)}"
    )
    write_text_atomic(out_dir / "index.html", page("FCPTS results", body))
    for stale in plots - drawn:
        stale.unlink()


def clear_but_plots(out_dir: Path) -> set[Path]:
    """Empty the site's folder but for its run plots, which are returned: a plot's name says what it draws."""
    kept = set((out_dir / "runs").glob("*.png"))
    for path in sorted(out_dir.rglob("*"), reverse=True) if out_dir.is_dir() else []:  # files before their folder
        if path in kept or path == out_dir / "runs":
            continue
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    return kept


def write_site(out: Path = SITE_DIR, runs_dir: Path = RUNS_DIR) -> str:
    """Build the site into `out` (`python -m tasks.reporting site`) and say what was written, in what time."""
    wall, cpu = time.perf_counter(), time.process_time()
    build_site(out, runs_dir)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    files = [f for f in out.rglob("*") if f.is_file()]
    runs = len(list((out / "runs").glob("*.html")))
    return (
        f"wrote {repo_relative(out / 'index.html')}: {runs} run pages, {len(files)} files, "
        f"{sum(f.stat().st_size for f in files) / 1e6:.1f} MB in {wall:.0f} s ({cpu:.0f} s of CPU)"
    )
