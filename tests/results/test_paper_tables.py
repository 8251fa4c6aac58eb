"""Tables are built from records alone, with the paper's numbers beside them."""

import json

from tasks.grid.records import preferred_records
from tasks.reporting.paper import read_reference, write_tables
from tests.fake_records import cifar_record


def test_reference_data_is_the_papers_table2():
    ref = {
        (r["dataset"], r["model"], r["method"], r["sparsity"]): r for r in read_reference() if r["table"] == "table2"
    }
    assert ref[("cifar10", "resnet56", "fcpts", "0.9")]["top1"] == "92.02"
    assert ref[("cifar100", "resnet32", "pot-l2norm", "0.9")]["top5"] == "11.55"
    assert len([k for k in ref if k[2] != "dense"]) == 36


def test_tables_from_records(tmp_path):
    runs = tmp_path / "runs" / "cifar" / "cifar10" / "resnet56"
    runs.mkdir(parents=True)
    record = {
        "task": "cifar",
        "dataset": "cifar10",
        "model": "resnet56",
        "method": "fcpts",
        "target_sparsity": 0.9,
        "metrics": {"top1": 90.5, "top5": 99.6},
        "dense_metrics": {"top1": 93.39, "top5": 99.77},
        "profile": {"name": "paper"},
        "wall_s": 600.0,
        "device": "cpu: test",
    }
    (runs / "fcpts-sp90-paper-seed0.json").write_text(json.dumps(record))
    pot = dict(
        record,
        method="pot-l2norm",
        metrics={"top1": 20.0, "top5": 70.0},
        wall_s=1800.0,
        per_layer=[
            {"name": "a", "iterations": 9, "objective": "gram"},
            {"name": "b", "iterations": 9, "objective": "forward"},
        ],
    )
    (runs / "pot-l2norm-sp90-paper-seed0.json").write_text(json.dumps(pot))
    trained = tmp_path / "weights" / "cifar100"
    trained.mkdir(parents=True)
    (trained / "resnet32.json").write_text(
        json.dumps(
            {
                "final_test": {"top1": 67.5, "top5": 89.9},
                "recipe": {"epochs": 40},
                "wall_s": 7200.0,
                "device": "cpu: test",
                "command": "python -m tasks.train --model resnet32",
            }
        )
    )
    paths = write_tables(tmp_path / "runs", tmp_path / "tables", tmp_path / "weights")
    t1 = paths[0].read_text()
    assert "**90.50/99.60** (−2.89) [paper] · 92.02/99.78" in t1
    assert "no record · 94.07/99.83" in t1
    assert "**67.50/89.90** (trained here) · 70.16/90.89" in t1  # CIFAR-100 dense from the training record
    assert "- cifar100 resnet32: 67.50/89.90 after 40 epochs (2.0 h on cpu: test)" in t1
    t6 = paths[3].read_text()
    assert "| cifar10 | resnet56 | 90% | paper | 30.0 | — | 10.0 | 0.33 | Gram on 1/2 layers | cpu: test |" in t6


def test_figure5_panels_from_records_and_without(tmp_path):
    from tasks.reporting.figures import _stage_ticks, allocation_panels, figure5

    layers = [{"name": n, "sparsity": s} for n, s in (("conv1", 0.0), ("layer1.0.conv1", 0.8), ("linear", 0.95))]
    rec = {
        "task": "cifar",
        "dataset": "cifar100",
        "model": "resnet32",
        "method": "fcpts",
        "target_sparsity": 0.9,
        "metrics": {"top1": 60.0},
        "profile": {"name": "paper-cpu"},
        "per_layer": layers,
    }
    pot = dict(rec, method="pot-l2norm", profile={"name": "paper"})
    fast = dict(rec, profile={"name": "fast"}, metrics={"top1": 55.0})
    other_target = dict(rec, target_sparsity=0.7)
    panels = allocation_panels([fast, rec, pot, other_target], "cifar", "cifar100")
    assert list(panels) == ["resnet32", "resnet56"] and panels["resnet56"] == []
    assert panels["resnet32"] == [rec, pot]  # preferred profile per method, legend order, 90% only
    lite = dict(rec, task="imagenet", dataset="imagenet-val1300", model="efficientnet_lite0", substitute=True)
    assert allocation_panels([lite], "imagenet", "imagenet-val1300") == {"efficientnet_lite0": [lite]}
    assert list(allocation_panels([], "imagenet", "imagenet")) == ["resnet18", "resnet50"]
    for records in ([rec], []):
        out = figure5(records, "cifar", "cifar100", tmp_path / f"fig{len(records)}.png")
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    resnet = ["conv1"] + [f"layer{s}.{b}.conv{c}" for s in (1, 2, 3) for b in range(5) for c in (1, 2)] + ["linear"]
    assert _stage_ticks(resnet) == [0, 11, 21, 31]  # layer1.0.conv1 sits next to conv1: thinned
    lite = (
        ["conv_stem", "blocks.0.0.conv_dw", "blocks.0.0.conv_pw"]
        + [f"blocks.{s}.{b}.{c}" for s in (1, 2) for b in (0, 1) for c in ("conv_pw", "conv_dw", "conv_pwl")]
        + ["conv_head", "classifier"]
    )
    assert _stage_ticks(lite) == [0, 3, 9, 16]  # conv_head and classifier adjacent: the last layer wins


def test_imagenet_tables_keep_substitute_and_sample_runs_apart(tmp_path):
    from tasks.reporting.paper import read_reference
    from tasks.reporting.tables_imagenet import table3, table4

    ref = read_reference()
    assert {(r["model"], r["method"], r["sparsity"], r["top1"]) for r in ref if r["table"] == "table3"} >= {
        ("resnet50", "fcpts", "0.9", "56.91"),
        ("mobilenet_v2", "pot-l2norm", "0.8", "0.22"),
    }
    base = {
        "task": "imagenet",
        "target_sparsity": 0.7,
        "hit_target": True,
        "profile": {"name": "cpu"},
        "metrics": {"top1": 60.0, "top5": 80.0},
        "dense_metrics": {"top1": 82.38, "top5": 95.15},
        "data": {"n_eval": 1300},
    }
    lite = dict(base, model="efficientnet_lite0", method="fcpts", dataset="imagenet-val1300")
    sample_r18 = dict(base, model="resnet18", method="fcpts", dataset="imagenet-val1300")
    t2 = table3([lite, sample_r18], ref)
    assert "**60.00/80.00** (−22.38) [cpu]" in t2  # the substitute row
    assert t2.count("**60.00/80.00**") == 1  # a sample-set ResNet-18 run never fills the paper's cell
    assert "| resnet18 (— · 70.88/90.45) | POT (L2Norm) | — · 70.06/89.12 |" in t2
    t3 = table4([lite], ref)
    assert "efficientnet_lite0" not in t3.split("—: no record")[0]
    assert "No substitute rows" in t3 and "Substitute rows:" not in t3 and "Substitute rows:" in t2
    assert "`not run yet`: `python -m tasks.imagenet" in t2  # says how to fill the empty substitute cells
    grid = [
        dict(lite, method=m, target_sparsity=sp)
        for m in ("pot-l2norm", "pot-erk", "probmask", "fcpts")
        for sp in (0.5, 0.6, 0.7, 0.8, 0.9)
    ]
    assert "not run yet" not in table3(grid, ref)  # nothing to fill: no such line


def test_figures_1_and_3_from_records(tmp_path):
    from tasks.reporting.figures import accuracy_curves, figure1, figure4, fixed_learned_pairs

    rec = cifar_record
    learned, fixed = rec("fcpts", 0.9, 88.0), rec("fcpts-fixed", 0.9, 85.0)
    records = [
        rec("fcpts", 0.7, 91.0),
        learned,
        fixed,
        rec("fcpts-fixed", 0.7, 80.0, profile="fast"),
        rec("fcpts", 0.9, 70.0, profile="paper-cpu-pot100"),
        rec("fcpts", 0.9, 80.0, model="resnet56"),
    ]
    assert fixed_learned_pairs(records) == [(fixed, learned)]  # same cell and profile only
    curves = accuracy_curves(records)
    assert list(curves) == [("cifar", "cifar10", "resnet32")]  # resnet56 has one sparsity: no curve
    # the compared methods only: the fcpts-fixed ablation is Figure 4's
    assert sorted(r["metrics"]["top1"] for r in curves[("cifar", "cifar10", "resnet32")]) == [88.0, 91.0]
    for fig, out in ((figure1, "f1.png"), (figure4, "f4.png")):
        assert fig(records, tmp_path / out).read_bytes()[:4] == b"\x89PNG"


def test_preferred_records_takes_the_most_faithful_profile_and_ignores_variants():
    def rec(profile, task="cifar", dataset="cifar10", sp=0.9, top1=50.0):
        return {
            "task": task,
            "dataset": dataset,
            "model": "m",
            "method": "fcpts",
            "target_sparsity": sp,
            "profile": {"name": profile},
            "metrics": {"top1": top1},
        }

    fast, paper_cpu = rec("fast", top1=80.0), rec("paper-cpu", top1=70.0)
    only_variant = rec("cpu-it400", sp=0.7)
    lite_cpu = rec("cpu", task="imagenet", dataset="imagenet-val1300")
    best = preferred_records(
        [
            fast,
            rec("paper-cpu-pot100", top1=90.0),
            paper_cpu,
            only_variant,
            lite_cpu,
            rec("quick", task="imagenet", dataset="imagenet-val1300"),
        ]
    )
    assert best == {
        ("cifar", "cifar10", "m", "fcpts", 0.9): paper_cpu,  # not fast, not the higher variant
        ("imagenet", "imagenet-val1300", "m", "fcpts", 0.9): lite_cpu,
    }  # not quick


def test_committed_tables_define_every_profile_tag_they_show():
    """Each `[profile]` tag a committed table shows is spelled out in its legend, from the records."""
    import re

    from tasks.grid.paths import RESULTS_DIR

    for name in ("table2_cifar.md", "table3_imagenet_cnn.md", "table5_voc.md", "table1_learned_masks.md"):
        text = (RESULTS_DIR / "tables" / name).read_text()
        cells = "\n".join(line for line in text.split("Legend")[0].splitlines() if line.startswith("| "))
        tags = set(re.findall(r"\*\* \([^)]*\) \[([\w.-]+)\]", cells))
        assert tags, name
        for tag in tags:
            assert f"- `[{tag}]`: " in text, (name, tag)


def test_substitute_note_states_images_preprocessing_and_the_published_number():
    from tasks.grid.paths import RESULTS_DIR
    from tasks.reporting.render import read_external

    external = read_external()
    table3 = (RESULTS_DIR / "tables" / "table3_imagenet_cnn.md").read_text()
    note = table3.split("Substitute rows:")[1]
    for fact in (
        f"published {external['efficientnet_lite0.published_top1']}",
        f"{external['imagenet-val1300.classes']} of the 1,000 classes",
        "resized to 256 (bilinear), centre-cropped to 224 and normalised as (x − 0.498) / 0.502",
        "`timm:tf_efficientnet_lite0`",
        "the 1,300 real ILSVRC-2012 validation images",
    ):
        assert fact in note, fact


def test_table7_labels_every_random_weight_row():
    import json

    from tasks.grid.paths import RESULTS_DIR

    raw = json.loads((RESULTS_DIR / "deploy" / "table7_inference.json").read_text())
    table = (RESULTS_DIR / "tables" / "table7_inference.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    for name, fam in raw["families"].items():
        random = fam["note"].startswith("random weights")
        mine = [r for r in rows if r.split(" | ")[0][2:].split(" (")[0] == name]
        assert mine, name
        assert all(("(random weights)" in r.split(" | ")[0]) == random for r in mine), name


def test_committed_tables_are_the_ones_the_records_generate(tmp_path):
    """`python -m tasks.reporting tables` run on the committed records writes the committed tables."""
    from tasks.grid.paths import RESULTS_DIR

    for path in write_tables(out_dir=tmp_path):
        committed = RESULTS_DIR / "tables" / path.name
        stale = f"{committed} is stale: run `python -m tasks.reporting tables`"
        assert path.read_text() == committed.read_text(), stale
