"""The README's generated blocks (between `<!-- BEGIN name -->` and `<!-- END name -->`): the methods table from
the registry and the results summary from the records; `python -m tasks.reporting readme` rewrites them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from fcpts.core.io import write_text_atomic
from fcpts.methods import METHODS, label
from fcpts.methods.registry import STUDIED_FAMILY, list_methods
from tasks.grid.paths import REPO_ROOT, RUNS_DIR, repo_relative
from tasks.grid.records import all_records, headline, preferred_records
from tasks.reporting.render import earlier_default_note, md_table, mean_sd, seeds_of

README = REPO_ROOT / "README.md"

# The results summary: one row per headline cell (task, dataset, model, sparsity, row label), one column per method.
SUMMARY_CELLS = [
    ("cifar", "cifar10", "resnet32", 0.9, "CIFAR-10 ResNet-32, 90%"),
    ("cifar", "cifar10", "resnet56", 0.9, "CIFAR-10 ResNet-56, 90%"),
    ("cifar", "cifar100", "resnet56", 0.9, "CIFAR-100 ResNet-56 (own dense model), 90%"),
    ("imagenet", "imagenet-val1300", "efficientnet_lite0", 0.7, "EfficientNet-Lite0 stand-in, 70%"),
    ("voc", "voc-cifar10", "mb2-ssd-lite-160", 0.9, "Detection substitute, MobileNetV2-SSD-Lite, 90%"),
    ("voc", "voc-cifar10", "mmdet-ssdlite_mobilenetv2_voc-cifar10-160", 0.9, "Detection substitute, mmdet, 90%"),
]


def summary_methods() -> list[str]:
    """The summary's columns: the registered methods marked `headline`, the studied method's family first, then in
    registry order."""
    names = [name for name in list_methods() if METHODS[name].headline]
    return sorted(names, key=lambda name: METHODS[name].family != STUDIED_FAMILY)


def methods_block() -> str:
    """Every registered method: its name for `get_method`/`--methods`, label, whether the paper has it, what it does."""
    rows = [
        [f"`{name}`", method.label, "yes" if method.in_paper else "no", method.summary]
        for name, method in sorted(METHODS.items(), key=lambda item: (not item[1].in_paper, item[0]))
    ]
    return md_table(["`name`", "method", "in the paper", "what it does"], rows)


def _value(record: dict | None, records: list[dict]) -> str:
    """The cell's headline number; with several seeds under the shown profile, their mean ± sd (n seeds)."""
    if record is None:
        return "—"
    values = [headline(r)[1] for r in seeds_of(record, records)]
    seeds = f" ({len(values)})" if len(values) > 1 else ""
    return f"{mean_sd(values)}{seeds}{earlier_default_note(record)}"


def results_block(runs_dir: Path = RUNS_DIR) -> str:
    """Top-1 (%) or mAP@0.5 of each headline cell: the record each of the paper's tables shows for it (the most
    faithful profile that ran it, seed 0), or the mean ± sd over its seeds where several ran, with the profiles
    those records ran under."""
    records = all_records(runs_dir)
    best = preferred_records(records)
    methods = summary_methods()
    header = ["cell", "dense", *(label(m) for m in methods), "profiles"]
    rows = []
    for task, dataset, model, sparsity, row_label in SUMMARY_CELLS:
        shown = {m: best.get((task, dataset, model, m, sparsity)) for m in methods}
        present = [r for r in shown.values() if r is not None]
        if not present:
            continue
        metric, _ = headline(present[0])
        dense = format(present[0]["dense_metrics"][metric], ".2f")
        profiles = ", ".join(f"`{p}`" for p in sorted({r["profile"]["name"] for r in present}))
        rows.append([row_label, dense, *(_value(shown[m], records) for m in methods), profiles])
    return md_table(header, rows, "l" + "r" * (len(header) - 2))


BLOCKS: dict[str, Callable[[], str]] = {"methods": methods_block, "results": results_block}


def render(text: str, blocks: dict[str, Callable[[], str]] = BLOCKS) -> str:
    """`text` with each marked block replaced by its generator's output; a marker without a generator, or a
    generator without its markers, is an error (a renamed block would otherwise go stale silently)."""
    found = re.findall(r"<!-- BEGIN (\w+) -->", text)
    unknown = sorted(set(found) - set(blocks))
    missing = sorted(set(blocks) - set(found))
    if unknown or missing:
        raise ValueError(f"README blocks: unknown {unknown}, missing {missing}; known blocks: {sorted(blocks)}")
    pattern = re.compile(r"(<!-- BEGIN (\w+) -->\n).*?(<!-- END \2 -->)", re.S)
    return pattern.sub(lambda m: m.group(1) + blocks[m.group(2)]() + "\n" + m.group(3), text)


def update(path: Path = README, check: bool = False) -> int:
    """Rewrite the generated blocks of `path`; with `check`, change nothing and return 1 when one is stale."""
    text, name = path.read_text(), repo_relative(path)
    new = render(text)
    if new == text:
        print(f"{name} is up to date")
        return 0
    if check:
        print(f"{name}: its generated blocks are stale: run python -m tasks.reporting readme", file=sys.stderr)
        return 1
    write_text_atomic(path, new)
    print(f"rewrote the generated blocks of {name}")
    return 0
