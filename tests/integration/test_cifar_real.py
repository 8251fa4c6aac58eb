"""The CIFAR task on the real checkpoints and real lossless CIFAR-10 images in ../shared/data."""

from pathlib import Path

import pytest
import torch

import fcpts
from fcpts.core.masks import sparsity_summary
from fcpts.methods import get_method
from tasks.cifar import grid as cifar
from tasks.cifar.grid import CifarCalibration
from tasks.deploy.driver import models_from_record, sparse_model_from_record
from tasks.grid.cifar_data import load_cifar, normalize_cifar
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.cli import main as task_main
from tasks.grid.evaluate import classify
from tasks.grid.paths import DataNotFoundError, calibration_indices, resolve_data_root
from tasks.grid.records import read_record
from tasks.grid.weights import default_cifar_weights, load_checkpoint

PUBLISHED = {"resnet20": 91.73, "resnet32": 92.63, "resnet44": 93.10, "resnet56": 93.39}


@pytest.fixture(scope="module")
def test_set():
    x, y = load_cifar(resolve_data_root(), "cifar10", "test")
    return normalize_cifar(x), torch.as_tensor(y)


def dense(name):
    m = cifar_resnet(name)
    load_checkpoint(m, default_cifar_weights(resolve_data_root(), "cifar10", name))
    return m


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_dense_accuracy_matches_published(name, test_set):
    top1 = classify(dense(name), *test_set)["top1"]
    assert abs(top1 - PUBLISHED[name]) <= 0.05  # the lossless images reproduce them exactly


def test_quick_fcpts_improves_over_its_magnitude_start(test_set):
    """ResNet-20 at 90%: the ERK magnitude-pruned start collapses; 60 FCPTS steps on 256 real
    training images must recover a large part of the accuracy (measured: ~10% -> ~70%)."""
    x_eval, y_eval = test_set[0][:2000], test_set[1][:2000]
    x_train, _ = load_cifar(resolve_data_root(), "cifar10", "train")
    calib = CifarCalibration(x_train[calibration_indices(len(x_train), 256, 0)])
    start, _ = get_method("erk")(dense("resnet20"), None, 0.9)
    start_top1 = classify(start, x_eval, y_eval)["top1"]
    model, report = fcpts.sparsify(dense("resnet20"), calib, 0.9, iterations=60, batch_size=64, progress=False)
    top1 = classify(model, x_eval, y_eval)["top1"]
    assert report.achieved_sparsity == pytest.approx(0.9, abs=1e-5)
    assert top1 > start_top1 + 30, (start_top1, top1)
    assert report.history[-1]["rec"] < report.history[0]["rec"]


def test_grid_writes_records_and_resumes(tmp_path, capsys):
    argv = [
        "--model",
        "resnet20",
        "--profile",
        "quick",
        "--methods",
        "erk",
        "fcpts",
        "--sparsity",
        "0.5",
        "0.8",
        "--results-dir",
        str(tmp_path),
        "--no-progress",
    ]
    assert task_main("cifar", argv) == 0
    files = sorted(f for f in tmp_path.rglob("*.json") if ".checkpoints" not in f.parts)
    assert len(files) == 4
    rec = read_record(tmp_path / "cifar/cifar10/resnet20/fcpts-sp80-quick-seed0.json")  # with its calibration lists
    for key in [
        "task",
        "dataset",
        "model",
        "method",
        "target_sparsity",
        "achieved_sparsity",
        "metrics",
        "dense_metrics",
        "calibration",
        "profile",
        "wall_s",
        "device",
        "git_commit",
        "command",
        "per_layer",
        "weights",
        "seed",
    ]:
        assert key in rec, key
    assert rec["calibration"]["n_images"] == 128 and len(rec["calibration"]["indices"]) == 128
    assert rec["hit_target"] and rec["weights"]["sha256"].startswith("12fca82f")
    assert {"top1", "top5"} <= set(rec["metrics"])
    # the sparse model itself is kept beside the records, with the recorded sparsity
    state = torch.load(tmp_path / "models/cifar/cifar10/resnet20/fcpts-sp80-quick-seed0.pt", weights_only=True)
    model = cifar_resnet("resnet20")
    model.load_state_dict(state)
    assert sparsity_summary(model)[0] == rec["achieved_sparsity"]
    # ... and deployment rebuilds both models from the record alone, refusing a sparse file that changed
    record_path = tmp_path / "cifar/cifar10/resnet20/fcpts-sp80-quick-seed0.json"
    dense, sparse, shape, _ = models_from_record(record_path)
    assert shape == (3, 32, 32) and sparsity_summary(dense)[0] < 0.01
    assert sparsity_summary(sparse)[0] == rec["achieved_sparsity"]
    ckpt = sparse_model_from_record(record_path, tmp_path / "deploy", None, progress=False)
    deployed = torch.load(ckpt, weights_only=False)
    assert deployed["source"].startswith("saved sparse model")  # no re-run: the grid's own weights
    assert all(torch.equal(deployed["state_dict"][k], v) for k, v in state.items())
    saved = Path(rec["sparse_model"]["path"])
    torch.save({k: v + 1 for k, v in state.items()}, saved)
    with pytest.raises(ValueError, match="sha256"):
        models_from_record(record_path)
    saved.unlink()
    with pytest.raises(DataNotFoundError, match="re-create it with"):
        models_from_record(record_path)
    capsys.readouterr()
    assert task_main("cifar", argv) == 0  # second time: every cell is skipped
    assert capsys.readouterr().out.count("[skip]") == 4


def test_pot_iterations_override_is_recorded_under_its_own_profile(tmp_path):
    argv = [
        "--model",
        "resnet20",
        "--profile",
        "quick",
        "--methods",
        "pot-l2norm",
        "--sparsity",
        "0.5",
        "--pot-iterations",
        "2",
        "--results-dir",
        str(tmp_path),
        "--no-progress",
    ]
    assert task_main("cifar", argv) == 0
    rec = read_record(tmp_path / "cifar/cifar10/resnet20/pot-l2norm-sp50-quick-pot2-seed0.json")
    assert rec["profile"]["name"] == "quick-pot2" and rec["method_options"]["iterations"] == 2
    assert {row["iterations"] for row in rec["per_layer"]} == {2}
    # POT keeps its own image count; the training-loop methods' budget is untouched
    assert rec["calibration"]["n_images"] == cifar.PROFILES["quick"].n_calibration_for("pot-l2norm")
    assert rec["profile"]["iterations"] == cifar.PROFILES["quick"].iterations
