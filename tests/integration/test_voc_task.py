"""The detection task end to end on a tiny VOC-layout set: training recipe (steps, resume), grid records."""

import json

import numpy as np
import pytest
import torch

from tasks.grid.cli import main as task_main
from tasks.grid.records import read_record
from tasks.voc import data as voc_data
from tasks.voc import train as train_ssd
from tasks.voc.data import VOCDetection
from tasks.voc.ssd import SSDConfig, create_ssd
from tests.integration.tiny_voc import write_tiny_voc


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
    """6 trainval + 4 test canvases in the VOC layout (random-pixel 'objects' and scenes: fast, no CIFAR)."""
    return write_tiny_voc(tmp_path_factory.mktemp("voc"))


def test_train_steps_resume_and_weights(tiny_set, tmp_path, capsys):
    args = [
        "--data-root",
        str(tiny_set),
        "--image-size",
        "64",
        "--epochs",
        "2",
        "--batch-size",
        "2",
        "--train-limit",
        "4",
        "--eval-limit",
        "4",
        "--eval-every",
        "1",
        "--results-dir",
        str(tmp_path / "w"),
        "--checkpoint-dir",
        str(tmp_path / "ck"),
        "--no-progress",
    ]
    assert train_ssd.main(args) == 0
    weights = tmp_path / "w" / "voc-tiny" / "mb2-ssd-lite-64.pth"
    record = json.loads(weights.with_suffix(".json").read_text())
    assert record["recipe"]["steps"] == 4 and len(record["history"]) == 2
    assert record["history"][0]["test"]["map50"] >= 0 and "map50" in record["final_test"]
    assert all(np.isfinite(h["cls_loss"]) and np.isfinite(h["loc_loss"]) for h in record["history"])
    first = weights.read_bytes()
    # a finished checkpoint is resumed, not retrained: same weights
    assert train_ssd.main(args) == 0
    assert "resuming" in capsys.readouterr().out
    assert weights.read_bytes() == first
    # the file is a plain pytorch-ssd state dict for an 11-class detector
    state = torch.load(weights, weights_only=True)
    assert tuple(state["classification_headers.5.weight"].shape) == (66, 64, 1, 1)
    # a worker process preparing the batches gives the same training
    other = [a if a != str(tmp_path / "ck") else str(tmp_path / "ck2") for a in args]
    other[other.index(str(tmp_path / "w"))] = str(tmp_path / "w2")
    assert train_ssd.main(other + ["--workers", "1"]) == 0
    state2 = torch.load(tmp_path / "w2" / "voc-tiny" / "mb2-ssd-lite-64.pth", weights_only=True)
    assert all(torch.equal(state[k], state2[k]) for k in state)


def test_a_base_net_that_is_no_checkpoint_is_named_in_one_line(tiny_set, tmp_path, capsys):
    bad = tmp_path / "base.pth"
    bad.write_text("not a checkpoint")
    assert train_ssd.main(["--data-root", str(tiny_set), "--base-net", str(bad), "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(bad) in err and "not a PyTorch checkpoint" in err and err.count("\n") == 1


def test_batches_depend_on_seed_and_step_only(tiny_set):
    data = VOCDetection(tiny_set / "VOCdevkit" / "VOC2007", "trainval")
    model = create_ssd("mb2-ssd-lite", 11)
    ds = voc_data.DetectionTrainSet(data, SSDConfig.for_model(model, 64))
    a, b = voc_data.batch_for_step(ds, 3, 2, 0), voc_data.batch_for_step(ds, 3, 2, 0)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert a[0].shape == (2, 3, 64, 64) and a[1].shape == (2, len(ds.priors), 4)
    assert (a[2] > 0).any()  # some priors matched an object


def test_pot_folds_bn_through_the_distill_view():
    from baselines.pot import POTOptions, pot
    from tasks.voc.ssd import DistillView

    torch.manual_seed(0)
    model = DistillView(create_ssd("mb2-ssd-lite", 11))
    sparse, report = pot(
        model, torch.randn(4, 3, 64, 64), 0.9, POTOptions(allocation="erk", iterations=1, progress=False)
    )
    assert len(report.extra["folded_bn"]) > 60  # every conv -> BN pair, heads included
    assert report.achieved_sparsity == pytest.approx(0.9, abs=1e-6)
    assert sparse(torch.randn(1, 3, 64, 64)).shape == (1, len(SSDConfig.for_model(model.ssd, 64).priors()) * 11)


def test_grid_records_map_for_fcpts_and_magnitude(tiny_set, tmp_path, monkeypatch):
    torch.manual_seed(0)
    weights = tmp_path / "det.pth"
    torch.save(create_ssd("mb2-ssd-lite", 11).state_dict(), weights)
    runs = tmp_path / "runs"
    argv = [
        "--data-root",
        str(tiny_set),
        "--models",
        "mb2-ssd-lite",
        "--image-size",
        "64",
        "--weights",
        str(weights),
        "--methods",
        "fcpts",
        "erk",
        "--profile",
        "quick",
        "--results-dir",
        str(runs),
        "--no-progress",
    ]
    assert task_main("voc", argv) == 0
    folder = runs / "voc" / "voc-tiny" / "mb2-ssd-lite-64"
    for method in ("fcpts", "erk"):
        rec = read_record(folder / f"{method}-sp90-quick-seed0.json")
        assert rec["hit_target"] and rec["achieved_sparsity"] == pytest.approx(0.9, abs=1e-5)
        assert set(rec["metrics"]) >= {"map50", "ap50_per_class", "n_images"} and "top1" not in rec["metrics"]
        assert rec["metrics"]["n_images"] == 4 and rec["substitute"] is True
        assert rec["calibration"]["split"] == "trainval" and rec["calibration"]["labels_used"] is False
    fc = read_record(folder / "fcpts-sp90-quick-seed0.json")
    assert fc["method_options"]["reconstruction"] == "mse-blocks"
    assert "ssd.regression_headers.0" in fc["method_options"]["block_names"]
    assert any(n.startswith("ssd.classification_headers") for n in (r["name"] for r in fc["per_layer"]))


def test_pot_option_override_is_applied_and_renames_the_profile(tiny_set, tmp_path, monkeypatch):
    torch.manual_seed(0)
    weights = tmp_path / "det.pth"
    torch.save(create_ssd("mb2-ssd-lite", 11).state_dict(), weights)
    argv = [
        "--data-root",
        str(tiny_set),
        "--models",
        "mb2-ssd-lite",
        "--image-size",
        "64",
        "--weights",
        str(weights),
        "--methods",
        "pot-l2norm",
        "--pot-option",
        "fold_bn=false",
        "--profile",
        "quick",
        "--results-dir",
        str(tmp_path / "runs"),
        "--no-progress",
    ]
    assert task_main("voc", argv) == 0
    rec = read_record(tmp_path / "runs/voc/voc-tiny/mb2-ssd-lite-64/pot-l2norm-sp90-quick-pot-fold_bnFalse-seed0.json")
    assert rec["method_options"]["fold_bn"] is False and rec["method_report"]["extra"]["folded_bn"] == []
    assert rec["profile"]["methods"]["pot-erk"]["options"]["fold_bn"] is False  # both allocations
    assert task_main("voc", [*argv[:-1], "--pot-option", "fold_bn"]) == 2  # not KEY=VALUE: a clear error


def test_missing_data_and_weights_are_clear(tmp_path, tiny_set, capsys):
    assert task_main("voc", ["--data-root", str(tmp_path), "--models", "mb1-ssd", "--profile", "quick"]) == 2
    assert "--data-root" in capsys.readouterr().err
    assert (
        task_main(
            "voc",
            [
                "--data-root",
                str(tiny_set),
                "--models",
                "mb2-ssd-lite",
                "--image-size",
                "64",
                "--profile",
                "quick",
                "--results-dir",
                str(tmp_path),
            ],
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "tasks.voc.train" in err and "--weights" in err


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["run", "dry-run"])
@pytest.mark.parametrize("name", ["../../escaped", "a/b", "..", "", 7])
def test_a_dataset_name_that_is_no_plain_name_is_refused_naming_the_file(tmp_path, name, dry_run, capsys):
    """The set's own metadata names the folder its records go to: it must not steer them out of --results-dir
    (nor the paths a dry run lists)."""
    manifest = write_tiny_voc(tmp_path / "set") / "VOCdevkit" / "VOC2007" / "substitute.json"
    manifest.write_text(json.dumps({"dataset": name}))
    argv = ["--data-root", str(tmp_path / "set"), "--models", "mb2-ssd-lite", "--image-size", "64", *dry_run]
    assert task_main("voc", [*argv, "--profile", "quick", "--results-dir", str(tmp_path / "runs" / "deep")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(manifest) in err and "plain name" in err
    assert not [p for p in tmp_path.rglob("*") if p.suffix in (".json", ".pt") and p != manifest]


def test_weights_that_are_no_checkpoint_are_named_in_one_line(tmp_path, tiny_set, capsys):
    bad = tmp_path / "ssd.pth"
    bad.write_text("not a checkpoint")
    argv = ["--data-root", str(tiny_set), "--models", "mb2-ssd-lite", "--image-size", "64", "--weights", str(bad)]
    assert task_main("voc", [*argv, "--profile", "quick", "--results-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(bad) in err and "not a PyTorch checkpoint" in err and err.count("\n") == 1


def test_table5_keeps_substitute_rows_apart():
    from tasks.reporting.paper import read_reference
    from tasks.reporting.tables_voc import table5

    def rec(dataset, model, method, m, substitute, target=0.9):
        return {
            "task": "voc",
            "dataset": dataset,
            "model": model,
            "method": method,
            "target_sparsity": target,
            "achieved_sparsity": target,
            "hit_target": True,
            "profile": {"name": "cpu"},
            "substitute": substitute,
            "metrics": {"map50": m},
            "dense_metrics": {"map50": 67.0},
            "wall_s": 1.0,
            "reconstruction": "mse-blocks",
        }

    text = table5(
        [
            rec("voc2007", "mb1-ssd", "fcpts", 64.0, False),
            rec("voc-cifar10", "mb2-ssd-lite-160", "pot-erk", 10.0, True),
        ],
        read_reference(),
    )
    main, subs = text.split("## Substitute rows")
    assert "| MobileNetV1 SSD (`mb1-ssd`) | 67.0 · 67.7 | POT (L2Norm) | no record | 48.5 |" in main
    assert "|  |  | FCPTS (ours) | **64.0** (−3.0) [cpu] | 65.1 |" in main
    assert "mb2-ssd-lite-160" not in main and "| voc-cifar10 | mb2-ssd-lite-160 | 67.0 |" in subs
    assert main.count("no record") == 6  # the 5 other paper cells and mb2-ssd-lite's dense
    without_voc = table5([rec("voc-cifar10", "mb2-ssd-lite-160", "pot-erk", 10.0, True)], read_reference())
    assert "no record: PASCAL VOC2007" in without_voc and "no record: PASCAL VOC2007" not in text
    # an mmdet detector on the substitute set sits beside the suite's SSD, at each target it was run at
    mmdet = "mmdet-ssdlite_mobilenetv2_voc-cifar10-160"
    both = table5(
        [
            rec("voc-cifar10", "mb2-ssd-lite-160", "fcpts", 31.0, True),
            rec("voc-cifar10", mmdet, "fcpts", 20.0, True, target=0.5),
            rec("voc-cifar10", mmdet, "pot-erk", 5.0, True),
        ],
        read_reference(),
    ).split("## Substitute rows")[1]
    assert f"| voc-cifar10 | {mmdet} | 67.0 | 50% | POT (L2Norm) | no record |" in both
    assert "|  |  |  |  | FCPTS (ours) | **20.0** (−47.0) [cpu] |" in both
    assert f"| voc-cifar10 | {mmdet} | 67.0 | 90% | POT (L2Norm) | no record |" in both
    assert "| voc-cifar10 | mb2-ssd-lite-160 | 67.0 | 90% |" in both and "mb2-ssd-lite-160 | 67.0 | 50%" not in both
