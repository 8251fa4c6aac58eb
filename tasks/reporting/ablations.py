"""The ablation tables the notebook quotes, made from the committed JSON lines of results/ablations/: one row a run
(`summarize`), or per variant its seeds' mean, sd and paired difference to `default` (`summarize_seeds`). The
benchmark that ran them is retired (`git show 9c9d2d1:benchmarks/accuracy/ablation.py`); its records stay."""

from __future__ import annotations

import statistics

from fcpts.core.io import read_json_lines
from tasks.reporting.render import md_table, mean_sd


def _reconstruction(row: dict) -> str:
    """The reconstruction loss a row ran with (older rows carry it in their provenance note)."""
    if "reconstruction" in row["options"]:
        return row["options"]["reconstruction"]
    if "resolved_options" in row:
        return row["resolved_options"]["reconstruction"]
    return "kl" if "reconstruction=kl" in row.get("provenance_note", "") else "mse-blocks"


def summarize(paths: list[str]) -> str:
    """A markdown table of finished rows (for the README), straight from the JSON lines."""
    header = "model|variant|reconstruction|lr|iterations|top-1|sparsity before exact step|wall s|threads".split("|")
    rows = []
    for path in paths:
        for r in read_json_lines(path):
            lr, threads = r["options"].get("lr", 0.01), r["device"].split(", ")[-1].split()[0]
            numbers = f"{r['top1']:.2f}", f"{r['sparsity_before_exact_step']:.4f}", f"{r['wall_s']:.0f}"
            rows.append([r["model"], r["variant"], _reconstruction(r), lr, r["iterations"], *numbers, threads])
    return md_table(header, rows, "lllrrrrrr")


def summarize_seeds(paths: list[str]) -> str:
    """A markdown table of variants run with several seeds: mean and sample sd of top-1, the mean difference
    to `default` over the seeds both ran (paired: a seed fixes the images and batches), and the mean sparsity
    the learned thresholds held before the exact-target step (how far that step had to move them)."""
    rows = [r for path in paths for r in read_json_lines(path)]
    groups: dict[tuple, dict[int, dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["iterations"], r["variant"]), {})[r["seed"]] = r
    out = []
    for (model, iterations, variant), by_seed in groups.items():
        seeds = sorted(by_seed)
        top1 = [by_seed[k]["top1"] for k in seeds]
        base = groups.get((model, iterations, "default"), {})
        paired = [by_seed[k]["top1"] - base[k]["top1"] for k in seeds if k in base]
        diff = f"{statistics.mean(paired):+.2f}" if paired and variant != "default" else ""
        per_seed = ", ".join(f"{t:.2f}" for t in top1)
        before = statistics.mean(by_seed[k]["sparsity_before_exact_step"] for k in seeds)
        out.append([model, iterations, variant, len(top1), mean_sd(top1), diff, per_seed, f"{before:.4f}"])
    header = "model|iterations|variant|seeds|top-1 mean ± sd|vs default (paired)|per seed|sparsity before exact step"
    return md_table(header.split("|"), out, "lrlrrrlr")
