"""docs/notebook/pot-vs-msbench.md's conclusions rest on the records it cites: its full-budget table (top-1, drop,
layer3 errors after reconstruction, the last conv's and the logits' errors in the network) and the points it says
each step buys are read from those records here."""

from __future__ import annotations

import json

import pytest

from tasks.grid.layout import read_reference
from tasks.grid.paths import REPO_ROOT, RESULTS_DIR
from tasks.grid.records import read_record

DOC = " ".join((REPO_ROOT / "docs" / "notebook" / "pot-vs-msbench.md").read_text().split())
CELL = RESULTS_DIR / "runs" / "cifar" / "cifar10" / "resnet32"


def paper_pot(sparsity: str, model: str = "resnet32") -> float:
    """The paper's Table 2: POT (L2Norm) on CIFAR-10 `model` at `sparsity`."""
    key = ("table2", "cifar10", model, "pot-l2norm", sparsity)
    fields = ("table", "dataset", "model", "method", "sparsity")
    return next(float(r["top1"]) for r in read_reference() if tuple(r[f] for f in fields) == key)


PAPER_TOP1 = paper_pot("0.8")
ROWS = {
    "`paper-cpu` (1,000 steps, 1,024 images)": "paper-cpu",
    "`paper` (20,000 steps, 10,000 images)": "paper",
    "`paper`, BN not folded (`--pot-option fold_bn=false`)": "paper-pot-fold_bnFalse",
}


def record(profile: str) -> dict:
    return read_record(CELL / f"pot-l2norm-sp80-{profile}-seed0.json")


@pytest.mark.parametrize("label", ROWS)
def test_the_full_budget_table_is_its_records(label):
    r = record(ROWS[label])
    rows = {row["name"]: row for row in r["per_layer"]}
    layer3 = [row["error_reconstructed"] for name, row in rows.items() if name.startswith("layer3")]
    drop = r["dense_metrics"]["top1"] - r["metrics"]["top1"]
    cells = [
        f"{r['metrics']['top1']:.2f}", f"{drop:.2f}", f"{min(layer3):.2f}-{max(layer3):.2f}",
        f"{rows['layer3.4.conv2']['error_in_network']:.2f}", f"{rows['linear']['error_in_network']:.2f}",
    ]  # fmt: skip
    assert f"| {label} | {' | '.join(cells)} |" in DOC


def test_the_points_each_step_buys_are_the_records_differences():
    cpu, paper, unfolded = (record(p)["metrics"]["top1"] for p in ("paper-cpu", "paper", "paper-pot-fold_bnFalse"))
    assert record("paper-pot-fold_bnFalse")["method_options"]["fold_bn"] is False
    assert record("paper")["method_options"]["fold_bn"] is True
    assert (
        f"buys {paper - cpu:.2f} of the {PAPER_TOP1 - cpu:.2f} missing points; {PAPER_TOP1 - paper:.2f} remain" in DOC
    )
    assert f"{unfolded:.2f} top-1 against {paper:.2f} with folding, {unfolded - paper:.2f} of the" in DOC
    assert f"{PAPER_TOP1 - unfolded:.2f} remain" in DOC and f"{PAPER_TOP1 - unfolded:.2f} without folding" in DOC
    assert f"gives {cpu:.2f} here (`paper-cpu`, Table 2's record" in DOC


def test_the_rates_the_doc_quotes_are_the_records():
    for profile, quoted in (("paper", "74.2-88.4% with it"), ("paper-pot-fold_bnFalse", "74.9-88.9% without folding")):
        rates = [row["sparsity"] for row in record(profile)["per_layer"] if row["name"].startswith("layer3")]
        low, high = quoted.split("%")[0].split("-")
        assert (f"{min(rates) * 100:.1f}", f"{max(rates) * 100:.1f}") == (low, high) and quoted in DOC


def test_the_90_percent_cell_with_and_without_folding_is_its_records():
    folded, unfolded = (
        read_record(CELL / f"pot-l2norm-sp90-{p}-seed0.json")["metrics"]["top1"]
        for p in ("paper", "paper-pot-fold_bnFalse")
    )
    paper90, paper80 = paper_pot("0.9"), record("paper")["metrics"]["top1"]
    assert f"{unfolded:.2f} without it against {folded:.2f} with it, where the paper has {paper90:.2f}" in DOC
    assert f"{PAPER_TOP1 - paper80:.2f} short of the paper at 80% and {paper90 - folded:.2f} at 90%" in DOC
    assert f"{unfolded - paper90:.2f} above at 90%" in DOC and f"{unfolded - folded:.2f} points at 90%" in DOC


@pytest.mark.parametrize("model", ["resnet32", "resnet56"])
@pytest.mark.parametrize("sparsity", ["0.8", "0.9"])
def test_the_cut_budget_folding_table_is_its_records(model, sparsity):
    cell = RESULTS_DIR / "runs" / "cifar" / "cifar10" / model
    name = f"pot-l2norm-sp{round(float(sparsity) * 100)}"
    folded, unfolded = (
        read_record(cell / f"{name}-{p}-seed0.json") for p in ("paper-cpu", "paper-cpu-pot-fold_bnFalse")
    )
    assert folded["calibration"]["indices"] == unfolded["calibration"]["indices"]  # the same images
    a, b = folded["metrics"]["top1"], unfolded["metrics"]["top1"]
    label = f"ResNet-{model.removeprefix('resnet')} {round(float(sparsity) * 100)}%"
    assert f"| {label} | {a:.2f} | {b:.2f} | {b - a:.2f} | {paper_pot(sparsity, model):.2f} |" in DOC


# The dense-network experiment: option-A and option-B ResNet-32s trained here with one recipe on CIFAR-10's
# 10,000 local training images, each pruned by the same commands as Table 2's akamaster cells.
SHORTCUT_DIR = RESULTS_DIR / "investigations" / "shortcut-option"
WEIGHTS_10K = RESULTS_DIR / "weights-cifar10-10k" / "cifar10"  # the two dense models and their training records
SHORTCUT_ROWS = {
    "akamaster, option A, 50,000 images (Table 2's records)": (CELL, "resnet32"),
    "option A, trained here, 10,000 images": (SHORTCUT_DIR / "runs" / "cifar" / "cifar10" / "resnet32", "resnet32"),
    "option B, trained here, 10,000 images": (SHORTCUT_DIR / "runs" / "cifar" / "cifar10" / "resnet32b", "resnet32b"),
}
SHORTCUT_METHODS = [
    ("pot-l2norm", ""),
    ("pot-l2norm", "-pot-fold_bnFalse"),
    ("magnitude-bn", ""),
    ("obs", ""),
    ("fcpts", ""),
]


def shortcut_row(label: str, sparsity: int) -> str:
    """The doc's table row for one dense model at one sparsity: dense top-1, then each method's top-1 (drop)."""
    folder, model = SHORTCUT_ROWS[label]
    cells = []
    dense = None
    for method, suffix in SHORTCUT_METHODS:
        path = folder / f"{method}-sp{sparsity}-paper-cpu{suffix}-seed0.json"
        if not path.is_file():
            cells.append("—")
            continue
        r = read_record(path)
        dense = r["dense_metrics"]["top1"]
        cells.append(f"{r['metrics']['top1']:.2f} (−{dense - r['metrics']['top1']:.2f})")
    return f"| {label} | {sparsity}% | {dense:.2f} | " + " | ".join(cells) + " |"


@pytest.mark.parametrize("sparsity", [80, 90])
@pytest.mark.parametrize("label", SHORTCUT_ROWS)
def test_the_shortcut_experiment_table_is_its_records(label, sparsity):
    assert shortcut_row(label, sparsity) in DOC


def test_the_shortcut_experiments_prose_is_its_records():
    def rec(model, sparsity, method="pot-l2norm", suffix=""):
        folder = SHORTCUT_ROWS[f"option {'B' if model.endswith('b') else 'A'}, trained here, 10,000 images"][0]
        return read_record(folder / f"{method}-sp{sparsity}-paper-cpu{suffix}-seed0.json")

    def drop(r):
        return f"{r['dense_metrics']['top1'] - r['metrics']['top1']:.2f}"

    a, b = rec("resnet32", 80), rec("resnet32b", 80)
    assert f"at 80% POT loses {drop(b)} points on it against {drop(a)}" in DOC
    assert f"option B ({drop(b)} against {drop(a)} points at 80%)" in DOC
    assert f"loses the same on both ({drop(rec('resnet32b', 80, 'obs'))} and {drop(rec('resnet32', 80, 'obs'))})" in DOC
    assert f"without BN folding POT still loses {drop(rec('resnet32b', 80, suffix='-pot-fold_bnFalse'))}" in DOC
    fcpts = ", ".join(
        f"{drop(rec('resnet32b', sp, 'fcpts'))} and {drop(rec('resnet32', sp, 'fcpts'))} at {sp}%" for sp in (80, 90)
    )
    assert f"FCPTS loses little on either ({fcpts})" in DOC

    def rows(r):
        return {row["name"]: row for row in r["per_layer"]}

    shortcuts = [f"{rows(b)[n]['sparsity']:.0%}" for n in ("layer2.0.shortcut.0", "layer3.0.shortcut.0")]
    assert f"nearly dense ({shortcuts[0]} and {shortcuts[1]} zeros)" in DOC

    def layer3(r):
        rates = [row["sparsity"] for n, row in rows(r).items() if n.startswith("layer3") and "shortcut" not in n]
        return f"{min(rates):.0%}"[:-1] + "-" + f"{max(rates):.0%}"

    assert f"puts {layer3(b)} on the other layer3 convs ({layer3(a)} on option A)" in DOC
    errors = [f"{rows(r)[n]['error_in_network']:.2f}" for n in ("layer3.4.conv2", "linear") for r in (b, a)]
    assert f"(last conv in the network {errors[0]} against {errors[1]}, logits {errors[2]} against {errors[3]})" in DOC
    walls = [json.loads((WEIGHTS_10K / f"{m}.json").read_text())["wall_s"] for m in ("resnet32", "resnet32b")]
    assert f"{walls[0]:,.0f} and {walls[1]:,.0f} s" in DOC
