"""Every task's command line at a tiny budget on each device (the CPU always, a GPU where there is one):
`--device` reaches the models, the calibration batches, the methods and the evaluation, and the record says
where the run happened."""

import json

import pytest
import torch

import tasks.voc as voc_cli
from tasks.cifar import train as cifar_train
from tasks.deploy import driver as deploy
from tasks.grid.cli import main as task_main
from tasks.voc import train as ssd_train
from tasks.voc.ssd import create_ssd
from tests.conftest import DEVICES, require_data, require_mmdet
from tests.integration.tiny_voc import write_tiny_voc


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
    return write_tiny_voc(tmp_path_factory.mktemp("voc"))


def record_path(runs):
    (path,) = runs.rglob("*-sp50-*.json")  # the one cell's record (dense metrics are cached beside it)
    return path


def only_record(runs):
    return json.loads(record_path(runs).read_text())


def cifar_cell(runs, device: str, method: str = "fcpts") -> list[str]:
    return ["--dataset", "cifar10", "--model", "resnet20", "--methods", method, "--sparsity", "0.5",
            "--profile", "quick", "--iterations", "2", "--results-dir", str(runs), "--device", device,
            "--no-progress"]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", ["fcpts", "fcpts-plus", "obs"])
def test_cifar_grid(tmp_path, device, method):
    assert task_main("cifar", cifar_cell(tmp_path / "runs", device, method)) == 0
    rec = only_record(tmp_path / "runs")
    assert rec["device"].startswith(device) and rec["hit_target"]
    assert rec["metrics"]["top1"] > 10  # pretrained ResNet-20 at 50%: far above chance


@pytest.mark.parametrize("device", DEVICES)
def test_imagenet_grid(tmp_path, device):
    require_data("imagenet", "the ImageNet sample")
    argv = ["--models", "efficientnet_lite0", "--methods", "fcpts", "--sparsity", "0.5", "--profile", "quick",
            "--iterations", "1", "--results-dir", str(tmp_path), "--device", device, "--no-progress"]  # fmt: skip
    assert task_main("imagenet", argv) == 0
    rec = only_record(tmp_path)
    assert rec["device"].startswith(device) and rec["hit_target"]


@pytest.mark.parametrize("device", DEVICES)
def test_voc_grid(tiny_set, tmp_path, device):
    torch.manual_seed(0)
    weights = tmp_path / "det.pth"
    torch.save(create_ssd("mb2-ssd-lite", 11).state_dict(), weights)
    argv = ["--data-root", str(tiny_set), "--models", "mb2-ssd-lite", "--image-size", "64", "--weights", str(weights),
            "--methods", "fcpts", "--sparsity", "0.5", "--profile", "quick", "--results-dir", str(tmp_path / "runs"),
            "--device", device, "--no-progress"]  # fmt: skip
    assert task_main("voc", argv) == 0
    rec = only_record(tmp_path / "runs")
    assert rec["device"].startswith(device) and rec["hit_target"] and rec["metrics"]["map50"] >= 0


@pytest.mark.parametrize("device", DEVICES)
def test_voc_grid_on_an_mmdet_detector(tiny_set, tmp_path, device):
    require_mmdet()
    from tasks.grid.paths import REPO_ROOT
    from tasks.voc.mmdet.detector import build_detector, load_config

    config = REPO_ROOT / "tasks" / "voc" / "mmdet" / "configs" / "ssdlite_mobilenetv2_voc-cifar10-160.py"
    torch.manual_seed(0)
    checkpoint = tmp_path / "ssdlite.pth"
    torch.save({"state_dict": build_detector(load_config(config)).state_dict(), "meta": {"epoch": 0}}, checkpoint)
    argv = ["--framework", "mmdet", "--config", str(config), "--weights", str(checkpoint), "--data-root",
            str(tiny_set), "--methods", "fcpts", "--sparsity", "0.5", "--profile", "quick", "--results-dir",
            str(tmp_path / "runs"), "--device", device, "--no-progress"]  # fmt: skip
    assert voc_cli.main(argv) == 0
    rec = only_record(tmp_path / "runs")
    assert rec["device"].startswith(device) and rec["hit_target"] and rec["metrics"]["map50"] >= 0


@pytest.mark.parametrize("device", DEVICES)
def test_deploy_re_runs_a_record_on_the_device_and_exports_on_the_cpu(tmp_path, device, monkeypatch):
    assert task_main("cifar", cifar_cell(tmp_path / "runs", device, method="erk")) == 0
    record = record_path(tmp_path / "runs")
    for saved in (tmp_path / "runs" / "models").rglob("*.pt"):
        saved.unlink()  # no saved sparse model: deploy re-runs the record's method
    monkeypatch.setattr(deploy, "RESULTS_DIR", tmp_path / "scratch")
    argv = ["--record", str(record), "--device", device, "--results-dir", str(tmp_path / "deploy"),
            "--eval-limit", "50", "--no-progress"]  # fmt: skip
    assert deploy.main(argv) == 0
    out = json.loads(next((tmp_path / "deploy").glob("*.json")).read_text())
    assert out["checkpoint"]["source"] == "re-run of the record's method"
    assert all(d == 0.0 for d in out["top1_diff_points"].values())


@pytest.mark.parametrize("device", DEVICES)
def test_cifar_training(tmp_path, device):
    argv = ["--dataset", "cifar10", "--model", "resnet20", "--epochs", "1", "--batch-size", "16", "--train-limit",
            "32", "--eval-limit", "32", "--results-dir", str(tmp_path / "w"), "--checkpoint-dir", str(tmp_path / "ck"),
            "--device", device, "--no-progress"]  # fmt: skip
    assert cifar_train.main(argv) == 0
    rec = json.loads((tmp_path / "w" / "cifar10" / "resnet20.json").read_text())
    assert rec["device"].startswith(device) and len(rec["history"]) == 1
    state = torch.load(tmp_path / "w" / "cifar10" / "resnet20.th", weights_only=True)["state_dict"]
    assert all(v.device.type == "cpu" for v in state.values())


@pytest.mark.parametrize("device", DEVICES)
def test_detection_training(tiny_set, tmp_path, device):
    argv = ["--data-root", str(tiny_set), "--image-size", "64", "--epochs", "1", "--batch-size", "2",
            "--train-limit", "4", "--eval-limit", "4", "--eval-every", "1", "--results-dir", str(tmp_path / "w"),
            "--checkpoint-dir", str(tmp_path / "ck"), "--device", device, "--no-progress"]  # fmt: skip
    assert ssd_train.main(argv) == 0
    rec = json.loads((tmp_path / "w" / "voc-tiny" / "mb2-ssd-lite-64.json").read_text())
    assert rec["device"].startswith(device) and rec["final_test"]["map50"] >= 0
