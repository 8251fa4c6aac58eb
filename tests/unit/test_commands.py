"""The task commands agree: the same flags everywhere, defaults in --help, --dry-run, full paths printed, and exit
statuses that tell "ran", "nothing to do" and "left to another process" apart."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

import tasks.voc as voc
from tasks.grid import estimate
from tasks.grid.cli import EXIT_BUSY, parse_args
from tasks.grid.cli import main as task_main
from tests.conftest import require_data

ROOT = Path(__file__).resolve().parents[2]


def test_every_task_takes_model_and_models():
    assert parse_args("cifar", ["--model", "resnet20"]).models == ["resnet20"]
    assert parse_args("cifar", ["--models", "resnet20", "resnet32"]).models == ["resnet20", "resnet32"]
    assert parse_args("imagenet", ["--model", "resnet18"]).models == ["resnet18"]
    assert parse_args("voc", ["--model", "mb1-ssd"]).models == ["mb1-ssd"]
    assert parse_args("voc", ["--models", "mb1-ssd"]).models == ["mb1-ssd"]


@pytest.mark.parametrize(
    "main", [partial(task_main, "cifar"), partial(task_main, "imagenet"), voc.main], ids=["cifar", "imagenet", "voc"]
)
def test_help_shows_defaults_and_exit_statuses(main, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0
    assert "default: 0" in out  # --seed
    assert "--dry-run" in out and "3  some cells were busy" in out
    assert "--model MODEL" in out and "--models MODEL" in out


def test_voc_help_names_its_frameworks(capsys):
    with pytest.raises(SystemExit):
        voc.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--framework {suite,mmdet}" in out and "--framework mmdet --help" in out


def test_tasks_grid_help_exits_0():
    done = subprocess.run([sys.executable, "-m", "tasks.grid", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and "status" in done.stdout


@pytest.mark.parametrize("main, holds", [(partial(task_main, "imagenet"), "ImageNet"), (voc.main, "VOCdevkit")])
def test_a_missing_data_root_says_what_it_holds_and_never_advises_a_missing_flag(main, holds, tmp_path, capsys):
    assert main(["--data-root", str(tmp_path / "absent"), "--profile", "quick", "--methods", "lamp"]) == 2
    err = capsys.readouterr().err
    assert holds in err and "--download" not in err


def _cifar(tmp_path: Path, *extra: str) -> list[str]:
    require_data("cifar10", "CIFAR-10")
    require_data("weights/cifar10/resnet20.th", "the CIFAR-10 ResNet-20 checkpoint")
    return ["--model", "resnet20", "--profile", "quick", "--methods", "uniform", "--results-dir", str(tmp_path),
            "--no-progress", *extra]  # fmt: skip


def test_dry_run_lists_cells_paths_and_estimates_and_runs_nothing(tmp_path, capsys):
    record = (tmp_path / "cifar/cifar10/resnet20/uniform-sp50-quick-seed0.json").resolve()
    assert task_main("cifar", _cifar(tmp_path, "--sparsity", "0.5", "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "to run   uniform" in out and str(record) in out and "nothing was run" in out
    assert not list(tmp_path.rglob("*.json"))

    assert task_main("cifar", _cifar(tmp_path, "--sparsity", "0.5")) == 0
    out = capsys.readouterr().out
    assert f"record: {record}" in out and "model:  " + str(tmp_path.resolve() / "models") in out
    assert f"records: {tmp_path.resolve()}" in out

    assert task_main("cifar", _cifar(tmp_path, "--sparsity", "0.5", "0.6", "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "done     uniform" in out and "median of 1 record(s) at other targets, made on cpu: " in out
    assert "2 cell(s): 1 with a record, 1 to run" in out


def test_exit_statuses_tell_nothing_to_do_and_busy_cells_apart(tmp_path, capsys):
    assert task_main("cifar", _cifar(tmp_path, "--sparsity", "0.5")) == 0
    capsys.readouterr()
    assert task_main("cifar", _cifar(tmp_path, "--sparsity", "0.5")) == 0
    assert "nothing to do: all 1 cell(s) already have records" in capsys.readouterr().out

    busy = tmp_path / "cifar/cifar10/resnet20/uniform-sp60-quick-seed0.json.lock"
    busy.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))  # a live process holds it
    assert task_main("cifar", _cifar(tmp_path, "--sparsity", "0.5", "0.6")) == EXIT_BUSY == 3
    assert "1 cell(s) busy in another process" in capsys.readouterr().out


def test_an_imagenet_cell_at_the_paper_budget_without_records_is_estimated_from_the_scale_projection(tmp_path):
    scale = {
        "mode": "full",
        "device": "cuda",
        "device_description": "cuda: Some GPU",
        "cells": [
            {"model": "resnet18", "method": "fcpts", "status": "ok", "projection": {"projected_s": 181.0}},
            {"model": "resnet50", "method": "obs", "status": "ok", "projection": {"projected_s": 9.0, "clamped": True}},
        ],
    }
    (tmp_path / "scale_cuda.json").write_text(json.dumps(scale))
    (tmp_path / "scale_cpu_small.json").write_text(json.dumps({**scale, "mode": "small", "device": "cpu"}))
    projected = estimate.scale_projections(tmp_path)
    assert list(projected) == [("resnet18", "fcpts")]  # the clamped one is a bound, not an estimate

    def guess(task="imagenet", model="resnet18", method="fcpts", profile="paper"):
        return estimate.estimate([], task, "imagenet", model, method, profile, 0.7, projected)

    assert guess().seconds == 181.0 and "cuda: Some GPU (scale_cuda.json)" in guess().basis
    assert guess(profile="cpu").seconds is None and guess(method="obs").seconds is None
    assert guess(task="cifar").seconds is None
    record = {"task": "imagenet", "dataset": "imagenet", "model": "resnet18", "method": "fcpts", "wall_s": 60.0}
    record |= {"eval_s": 0.0, "profile": {"name": "paper"}, "target_sparsity": 0.7}
    assert (
        estimate.estimate([record], "imagenet", "imagenet", "resnet18", "fcpts", "paper", 0.7, projected).seconds == 60
    )


def without(packages: list[str], module: str, *argv: str) -> subprocess.CompletedProcess:
    """`python -m module *argv` in a Python where `packages` cannot be imported (as in the core install)."""
    code = (
        f"import runpy, sys\nfor name in {packages!r}: sys.modules[name] = None\n"
        f"sys.argv = [{module!r}, *{list(argv)!r}]\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "packages, argv, extra",
    [
        (["PIL", "torchvision", "timm"], ["tasks.imagenet", "--dry-run"], "tasks"),
        (["matplotlib"], ["tasks.reporting", "figures", "--results-dir", "{tmp}"], "figures"),
    ],
    ids=["imagenet", "figures"],
)
def test_a_missing_optional_package_is_one_line_naming_its_extra(packages, argv, extra, tmp_path):
    done = without(packages, *[a.format(tmp=tmp_path) for a in argv])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(f'pip install -e ".[{extra}]" in the checkout')
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_mmdet_task_reads_its_flags_without_mmdet_and_names_the_extra_once_they_parse(tmp_path):
    mmdet = ["mmdet", "mmengine", "mmcv"]
    helped = without(mmdet, "tasks.voc", "--framework", "mmdet", "--help")
    assert helped.returncode == 0 and "usage: python -m tasks.voc --framework mmdet" in helped.stdout
    for argv in (
        ["tasks.voc", "--framework", "mmdet", "--config", "c.py"],
        ["tasks.voc.mmdet.train", "--config", "c.py"],
    ):
        done = without(mmdet, *argv, "--results-dir", str(tmp_path))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith("error: ") and "pip install -e '.[mmdet]'" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_figures_help_needs_no_matplotlib():
    done = without(["matplotlib"], "tasks.reporting", "figures", "--help")
    assert done.returncode == 0 and "usage: python -m tasks.reporting figures" in done.stdout


@pytest.mark.parametrize(
    "main, argv",
    [
        (partial(task_main, "cifar"), ["--model", "resnet20"]),
        (partial(task_main, "imagenet"), ["--sparsity", "0.7"]),
        (voc.main, []),
        (
            voc.main,
            ["--framework", "mmdet", "--config", "tasks/voc/mmdet/configs/ssdlite_mobilenetv2_voc-cifar10-160.py"],
        ),
    ],
    ids=["cifar", "imagenet", "voc", "voc-mmdet"],
)
def test_a_dry_run_needs_no_data(main, argv, tmp_path, capsys):
    """Listing the cells and their estimates reads no data: a missing data root is said, not an error."""
    if "mmdet" in argv:
        pytest.importorskip("mmdet")
    absent = str(tmp_path / "absent")
    argv = [*argv, "--data-root", absent, "--methods", "fcpts", "--results-dir", str(tmp_path), "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "nothing was run" in out and "to run   fcpts" in out
    if argv[:2] != ["--model", "resnet20"]:  # not CIFAR: a dataset named from the data is said to be assumed
        assert f"data root {absent}" in out and "listed as dataset" in out


def _timed(model: str, method: str, profile: str, weights: int, wall_s: float, **budget) -> dict:
    budget = {"iterations": 400, "batch_size": 64, "options": None, **budget}
    return {
        "task": "cifar", "dataset": "cifar10", "model": model, "method": method, "profile": {"name": profile},
        "target_sparsity": 0.9, "wall_s": wall_s, "eval_s": 10.0, "budget": budget,
        "calibration": {"n_images": 1024}, "per_layer": [{"numel": weights}],
        "_path": f"{model}-{method}-{profile}.json",
    }  # fmt: skip


def test_a_cell_without_its_own_records_is_scaled_from_the_same_method_on_another_model_or_profile():
    """ResNet-56's POT at the paper budget, from ResNet-32's POT at paper-cpu: x2 parameters, x20 iterations."""
    records = [
        _timed("resnet32", "pot-l2norm", "paper-cpu", 100, 60.0, options={"iterations": 1000}),
        _timed("resnet56", "fcpts", "fast", 200, 100.0),  # only tells ResNet-56's size
    ]
    budget = {"iterations": 1600, "batch_size": 64, "options": {"iterations": 20000}, "n_images": 1024}
    guess = estimate.estimate(records, "cifar", "cifar10", "resnet56", "pot-l2norm", "paper", 0.8, None, budget)
    assert guess.seconds == pytest.approx(60.0 * 2 * 20 + 10.0)
    assert "resnet32-pot-l2norm-paper-cpu.json" in guess.basis and "x40" in guess.basis
    assert guess.basis.endswith("made on an unnamed machine")  # machine speed is not scaled: the user sees whose
    assert (
        estimate.estimate(records, "cifar", "cifar10", "resnet20", "pot-l2norm", "paper", 0.8, None, budget).seconds
        is None
    )


def test_a_grid_adds_its_start_and_dense_evaluation_once():
    start = estimate.grid_start(
        [_timed("resnet56", "fcpts", "fast", 200, 100.0)], "cifar", "cifar10", "resnet56", False
    )
    assert start.seconds == estimate.START_S["cifar"] + 10.0 and "dense evaluation" in start.basis
    kept = estimate.grid_start([], "cifar", "cifar10", "resnet56", True)
    assert kept.seconds == estimate.START_S["cifar"] and "kept" in kept.basis


def help_text(module: str, *argv: str, monkeypatch: pytest.MonkeyPatch, capsys) -> str:
    """What `python -m module *argv --help` prints, run as python -m runs it."""
    import runpy

    monkeypatch.setattr(sys, "argv", [module, *argv, "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert stop.value.code in (0, None)
    return " ".join(capsys.readouterr().out.split())


WRITERS = [
    ("tasks.cifar",),
    ("tasks.imagenet",),
    ("tasks.voc",),
    ("tasks.deploy",),
    ("tasks.regression",),
    ("tasks.cifar.train",),
    ("tasks.voc.train",),
    ("tasks.reporting", "figures"),
    ("tasks.reporting", "site"),
]


@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import:RuntimeWarning")
@pytest.mark.parametrize("command", WRITERS, ids=lambda c: " ".join(c))
def test_every_command_names_its_output_folder_results_dir(command, monkeypatch, capsys):
    text = help_text(*command, monkeypatch=monkeypatch, capsys=capsys).replace("make_set --out", "")  # writes data
    assert "--results-dir" in text
    assert not any(old in text for old in ("--out-dir", "--out ", "--keep", "--checkpoint ")), text


@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import:RuntimeWarning")
@pytest.mark.parametrize("module", ["tasks.cifar", "tasks.imagenet", "tasks.voc", "tasks.deploy", "tasks.cifar.train"])
def test_every_device_flag_has_one_default_policy_shown_in_help(module, monkeypatch, capsys):
    assert "(default: cuda when available, else cpu)" in help_text(module, monkeypatch=monkeypatch, capsys=capsys)


def test_imagenet_help_says_which_sparsities_it_runs_by_default(monkeypatch, capsys):
    text = help_text("tasks.imagenet", monkeypatch=monkeypatch, capsys=capsys)
    assert "(default: the paper's: 0.5 0.6 0.7 0.8 0.9 for CNNs, 0.5 0.6 0.7 for ViTs)" in text


def test_a_former_flag_still_works_and_says_it_is_deprecated(capsys):
    from tasks.deploy.driver import parse_args

    assert parse_args(["--checkpoint", "m.pt", "--out-dir", "d"]).sparse_weights == "m.pt"
    err = capsys.readouterr().err
    assert "--checkpoint is deprecated: use --sparse-weights" in err and "--out-dir is deprecated" in err
    assert parse_args(["--sparse-weights", "m.pt"]).device is None  # the policy applies when it runs


def imports_torch(module: str, *argv: str) -> bool:
    """Whether `python -m module *argv` imports torch (run in a fresh Python)."""
    code = (
        f"import runpy, sys\nsys.argv = [{module!r}, *{list(argv)!r}]\n"
        f"try:\n    runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    return done.stderr.strip().splitlines()[-1] == "True"


@pytest.mark.parametrize(
    "argv",
    [["tasks.reporting", "--help"], *(["tasks.reporting", c, "--help"] for c in ("tables", "figures", "readme"))]
    + [
        ["tasks.deploy", "--help"],
        ["tasks.grid", "--help"],
        ["tasks.grid", "status", "--help"],
        ["tasks.regression", "--help"],
        ["tasks.voc.make_set", "--help"],
        ["tasks.voc", "--framework", "mmdet", "--help"],
        ["tasks.voc.mmdet", "--help"],
        ["tasks.voc.mmdet.train", "--help"],
        ["tasks.cifar.train", "--help"],
        ["tasks.voc.train", "--help"],
    ]
    + [[f"tasks.{task}", "--help"] for task in ("cifar", "imagenet", "voc")]
    + [["tasks.cifar", "--profile", "nope"]],
    ids=lambda argv: " ".join(argv),
)
def test_help_imports_no_torch(argv):
    """--help answers in a fraction of a second: torch (5 s to import here) is imported only by work."""
    assert not imports_torch(*argv)


def test_a_models_folder_that_is_a_file_ends_in_one_line_naming_it(tmp_path, capsys):
    (tmp_path / "models").write_text("a file where the sparse models go")
    assert task_main("cifar", _cifar(tmp_path, "--sparsity", "0.5")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and str(tmp_path / "models") in err and err.count("\n") == 1
