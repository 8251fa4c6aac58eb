"""Bad grid inputs end in one named error before any work: option values of every cell, NaN dense weights,
damaged side files (recovered by --force), an unwritable results folder."""

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import fcpts
from tasks.grid import status
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.cli import main as task_main
from tasks.grid.profiles import Profile
from tasks.grid.runner import Grid, dense_factory, run_grid
from tasks.imagenet import grid as imagenet

ROOT = Path(__file__).resolve().parents[2]


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))


def grid(tmp_path: Path, methods: dict | None = None, dense: nn.Module | None = None) -> Grid:
    return Grid(
        task="t", dataset="d", model="m", build_model=dense_factory(net, dense or net(), "cpu"),
        make_calibration=lambda n, augment: (torch.randn(n, 3, 8, 8), {"n_images": n, "indices": list(range(n))}),
        evaluate=lambda model: {"top1": 50.0, "top5": 90.0},
        profile=Profile("tiny", n_calibration=8, iterations=2, batch_size=4, methods=methods or {}), seed=0,
        provenance={"weights": {"sha256": "a"}}, runs_dir=tmp_path / "runs", progress=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--option", "lr=abc"], "lr='abc'"),
        (["--option", "iterations=abc"], "iterations='abc'"),
        (["--option", "temperature=0"], "temperature must be > 0"),
        (["--option", "lr=-0.1"], "lr must be > 0"),
        (["--methods", "pot-erk", "--pot-iterations", "-5"], "iterations must be >= 0"),
        (["--methods", "lamp", "fcpts", "--option", "reconstruction=foo"], "reconstruction='foo'"),
    ],
)
def test_a_bad_option_value_is_one_line_before_data_and_before_any_cell(tmp_path, capsys, flags, named):
    """The data folder does not exist: an error about the option shows it was checked before the data was read."""
    argv = ["--model", "resnet20", "--profile", "quick", "--data-root", str(tmp_path / "absent")]
    code = task_main("cifar", [*argv, "--results-dir", str(tmp_path / "runs"), *flags])
    err = capsys.readouterr().err
    assert code == 2 and named in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*.json"))


def test_a_grid_whose_second_method_cannot_run_writes_no_record(tmp_path):
    bad = {"fcpts": {"options": {"reconstruction": "foo"}}}
    with pytest.raises(ValueError, match="reconstruction='foo'"):
        run_grid(grid(tmp_path, bad), ["lamp", "fcpts"], [0.5], log=lambda _: None)
    assert not list(tmp_path.rglob("*.json"))


def test_option_values_of_the_wrong_type_or_range_are_named_errors():
    x = torch.randn(8, 4)
    with pytest.raises(TypeError, match="lr='abc' of FCPTSOptions must be a number or None"):
        fcpts.sparsify(nn.Linear(4, 4), x, 0.5, lr="abc")
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        fcpts.sparsify(nn.Linear(4, 4), x, 0.5, temperature=0)
    with pytest.raises(ValueError, match="iterations must be >= 0, got -5"):
        fcpts.get_method("pot-erk")(nn.Linear(4, 4), x, 0.5, iterations=-5)
    with pytest.raises(ValueError, match="schedule_fraction"):
        fcpts.get_method("probmask").make_options(overrides={"schedule_fraction": 0})
    with pytest.raises(ValueError, match="search_runs must be >= 1"):
        fcpts.get_method("str").make_options(overrides={"search_runs": 0})
    for name in fcpts.METHODS:  # every method's defaults pass their own checks
        fcpts.get_method(name).make_options()


def test_nan_dense_weights_are_refused_before_any_cell(tmp_path):
    broken = net()
    with torch.no_grad():
        broken[0].weight[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"parameter .0.weight. holds 1 NaN/Inf"):
        grid(tmp_path, dense=broken)


def test_the_cifar_task_refuses_a_nan_checkpoint_with_exit_2(tmp_path, capsys):
    model = cifar_resnet("resnet20")
    with torch.no_grad():
        model.linear.bias[0] = float("nan")
    weights = tmp_path / "resnet20-nan.th"
    torch.save({"state_dict": model.state_dict()}, weights)
    argv = ["--model", "resnet20", "--profile", "quick", "--methods", "lamp", "--weights", str(weights)]
    code = task_main("cifar", [*argv, "--results-dir", str(tmp_path / "runs"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "linear.bias" in err and str(weights) in err and "--weights" in err, err
    assert not list((tmp_path / "runs").rglob("*.json"))


def test_a_damaged_dense_metrics_cache_is_named_and_force_rebuilds_it(tmp_path):
    run_grid(grid(tmp_path), ["uniform"], [0.5], log=lambda _: None)
    (cache,) = (tmp_path / "runs/.checkpoints").rglob("dense-*.json")
    cache.write_text('{"metrics": {"top1": 5')
    with pytest.raises(ValueError, match=re.escape(str(cache)) + ".*--force"):
        run_grid(grid(tmp_path), ["uniform"], [0.6], log=lambda _: None)
    run_grid(grid(tmp_path), ["uniform"], [0.6], force=True, log=lambda _: None)
    assert json.loads(cache.read_text())["metrics"]["top1"] == 50.0


def test_a_nan_in_the_dense_metrics_cache_is_refused_naming_it(tmp_path):
    run_grid(grid(tmp_path), ["uniform"], [0.5], log=lambda _: None)
    (cache,) = (tmp_path / "runs/.checkpoints").rglob("dense-*.json")
    cache.write_text(cache.read_text().replace('"top1": 50.0', '"top1": NaN'))
    with pytest.raises(ValueError, match=re.escape(str(cache)) + ".*top1: not a finite number"):
        run_grid(grid(tmp_path), ["uniform"], [0.6], log=lambda _: None)
    assert not list((tmp_path / "runs").rglob("uniform-sp60*.json"))


def test_a_damaged_submission_manifest_is_named_and_force_discards_it(tmp_path, capsys):
    folder = tmp_path / ".jobs/t/d/m/tiny-seed0"
    status.write_cells(folder, {"task": "t"}, {"r": {"record": "r", "cell": "c", "command": None, "job_id": None}})
    manifest = folder / "submission.json"
    manifest.write_text(manifest.read_text()[:40])
    with pytest.raises(ValueError, match=re.escape(str(manifest)) + ".*--force"):
        status.read_cells(folder)
    assert status.main(["--results-dir", str(tmp_path)]) == 2
    assert str(manifest) in capsys.readouterr().err
    assert status.read_cells(folder, discard_damaged=True) == {} and not manifest.exists()


@pytest.mark.parametrize("value", ["-1", "1.5", "x"])
def test_a_seed_that_cannot_name_a_record_is_refused_by_the_parser(capsys, value):
    with pytest.raises(SystemExit) as stop:
        task_main("cifar", ["--model", "resnet20", "--seed", value, "--dry-run"])
    assert stop.value.code == 2 and "a seed is a whole number >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("task", ["cifar", "imagenet"])
def test_a_method_or_target_given_twice_is_one_cell(tmp_path, capsys, task):
    model = "resnet20" if task == "cifar" else "efficientnet_lite0"
    argv = ["--model", model, "--profile", "quick", "--results-dir", str(tmp_path / "runs"), "--dry-run"]
    assert task_main(task, [*argv, "--methods", "lamp", "fcpts", "lamp", "--sparsity", "0.9", "0.90", "0.5"]) == 0
    out = capsys.readouterr().out
    cells = re.findall(r"to run +(\S+) +(\S+)%", out)
    assert cells == [("lamp", "90.00"), ("lamp", "50.00"), ("fcpts", "90.00"), ("fcpts", "50.00")], out


def test_an_imagenet_dry_run_lists_the_paper_grid_without_fetching_weights(tmp_path, capsys, monkeypatch):
    def offline(*_, **__):
        raise AssertionError("a dry run fetched weights")

    monkeypatch.setattr(imagenet, "pretrained", offline)
    argv = ["--models", "paper", "--all-methods", "--profile", "paper", "--results-dir", str(tmp_path), "--dry-run"]
    assert task_main("imagenet", argv) == 0
    out = capsys.readouterr().out
    models = imagenet.PAPER_CNNS + imagenet.PAPER_VITS
    cells = sum(len(imagenet.all_methods(m)) * len(imagenet.paper_sparsities(m)) for m in models)
    assert f"{cells} cell(s): 0 with a record, {cells} to run" in out and "vit_large/fcpts-sp70-paper-seed0" in out


def test_an_unwritable_results_folder_is_refused_at_start(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = ["--model", "resnet20", "--profile", "quick", "--methods", "lamp", "--data-root", str(ROOT / "missing")]
    assert task_main("cifar", [*argv, "--results-dir", str(blocker / "runs")]) == 2
    err = capsys.readouterr().err
    assert "cannot write into" in err and "--results-dir" in err and "Traceback" not in err


def test_nan_images_of_a_dataset_are_named_by_their_indices():
    x = torch.randn(8, 4)
    x[2, 0] = x[5, 1] = float("nan")
    with pytest.raises(ValueError, match=r"dataset indices 2, 5\)"):
        fcpts.sparsify(nn.Linear(4, 4), torch.utils.data.TensorDataset(x), 0.5, iterations=1, batch_size=8)


def test_an_options_object_built_by_hand_is_checked_too():
    with pytest.raises(TypeError, match="iterations='3'"):
        fcpts.get_method("fcpts")(nn.Linear(4, 4), torch.randn(8, 4), 0.5, fcpts.FCPTSOptions(iterations="3"))
