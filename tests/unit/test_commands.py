"""The task commands agree: the same flags everywhere, defaults in --help, --dry-run, full paths printed, and exit
statuses that tell "ran", "nothing to do" and "left to another process" apart."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.cifar import grid as cifar
from tasks.grid import estimate
from tasks.grid.cli import EXIT_BUSY
from tasks.imagenet import grid as imagenet
from tasks.voc import command as voc
from tasks.voc import grid as detection
from tests.conftest import require_data

ROOT = Path(__file__).resolve().parents[2]


def test_every_task_takes_model_and_models():
    assert cifar.parse_args(["--model", "resnet20"]).models == ["resnet20"]
    assert cifar.parse_args(["--models", "resnet20", "resnet32"]).models == ["resnet20", "resnet32"]
    assert imagenet.parse_args(["--model", "resnet18"]).models == ["resnet18"]
    assert detection.parse_args(["--model", "mb1-ssd"]).models == ["mb1-ssd"]
    assert detection.parse_args(["--models", "mb1-ssd"]).models == ["mb1-ssd"]


@pytest.mark.parametrize("main", [cifar.main, imagenet.main, voc.main], ids=["cifar", "imagenet", "voc"])
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


@pytest.mark.parametrize("main, holds", [(imagenet.main, "ImageNet"), (voc.main, "VOCdevkit")])
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
    assert cifar.main(_cifar(tmp_path, "--sparsity", "0.5", "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "to run   uniform" in out and str(record) in out and "nothing was run" in out
    assert not list(tmp_path.rglob("*.json"))

    assert cifar.main(_cifar(tmp_path, "--sparsity", "0.5")) == 0
    out = capsys.readouterr().out
    assert f"record: {record}" in out and "model:  " + str(tmp_path.resolve() / "models") in out
    assert f"records: {tmp_path.resolve()}" in out

    assert cifar.main(_cifar(tmp_path, "--sparsity", "0.5", "0.6", "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "done     uniform" in out and "median of 1 record(s) at other targets" in out
    assert "2 cell(s): 1 with a record, 1 to run" in out


def test_exit_statuses_tell_nothing_to_do_and_busy_cells_apart(tmp_path, capsys):
    assert cifar.main(_cifar(tmp_path, "--sparsity", "0.5")) == 0
    capsys.readouterr()
    assert cifar.main(_cifar(tmp_path, "--sparsity", "0.5")) == 0
    assert "nothing to do: all 1 cell(s) already have records" in capsys.readouterr().out

    busy = tmp_path / "cifar/cifar10/resnet20/uniform-sp60-quick-seed0.json.lock"
    busy.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))  # a live process holds it
    assert cifar.main(_cifar(tmp_path, "--sparsity", "0.5", "0.6")) == EXIT_BUSY == 3
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


def test_a_models_folder_that_is_a_file_ends_in_one_line_naming_it(tmp_path, capsys):
    (tmp_path / "models").write_text("a file where the sparse models go")
    assert cifar.main(_cifar(tmp_path, "--sparsity", "0.5")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and str(tmp_path / "models") in err and err.count("\n") == 1
