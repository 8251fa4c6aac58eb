"""Bad input gets a clear error that names the problem and the fix."""

import re

import pytest
import torch
from torch import nn
from torch.nn.utils import prune

import fcpts
from fcpts.core.masks import NoPrunableLayersError
from tasks.grid.cifar_data import load_cifar
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.cli import main as task_main
from tasks.grid.paths import DataNotFoundError, resolve_data_root
from tasks.grid.weights import load_checkpoint


@pytest.mark.parametrize("target", [-0.1, 1.0, 1.5])
def test_target_outside_unit_interval(target):
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        fcpts.sparsify(nn.Linear(4, 4), torch.randn(4, 4), target)


def test_target_of_wrong_type():
    with pytest.raises(TypeError, match="number"):
        fcpts.sparsify(nn.Linear(4, 4), torch.randn(4, 4), "0.9")


def test_model_without_prunable_layers():
    with pytest.raises(NoPrunableLayersError, match="no prunable layers"):
        fcpts.sparsify(nn.Sequential(nn.ReLU(), nn.BatchNorm1d(4)), torch.randn(4, 4), 0.5)


@pytest.mark.parametrize(
    ("selection", "said"),
    [
        ({"exclude": ["0", "2"]}, r"exclude=\['0', '2'\] left none of Sequential's 2 prunable layers"),
        ({"filter_fn": lambda module, name: False}, r"filter_fn left none of Sequential's 2 prunable layers"),
    ],
)
def test_a_selection_that_leaves_no_layer_says_so(selection, said):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(NoPrunableLayersError, match=said + r" \(e.g. \['0', '2'\]\) to prune: keep at least one"):
        fcpts.sparsify(model, torch.randn(4, 4), 0.5, **selection)


def test_excluding_an_unknown_layer():
    with pytest.raises(ValueError, match="not Conv2d/Linear layers"):
        fcpts.sparsify(nn.Linear(4, 4), torch.randn(4, 4), 0.5, exclude=["nope"])


def test_unknown_option():
    with pytest.raises(TypeError, match="'fcpts' has no option iteratons"):
        fcpts.sparsify(nn.Linear(4, 4), torch.randn(4, 4), 0.5, iteratons=3)


def test_bad_option_value():
    with pytest.raises(ValueError, match="teacher_mode"):
        fcpts.sparsify(nn.Linear(4, 4), torch.randn(4, 4), 0.5, teacher_mode="frozen")


def test_empty_calibration():
    with pytest.raises(ValueError, match="empty"):
        fcpts.sparsify(nn.Linear(4, 4), torch.utils.data.TensorDataset(torch.empty(0, 4)), 0.5)


def test_missing_data_root(tmp_path, monkeypatch):
    monkeypatch.delenv("FCPTS_DATA_ROOT", raising=False)
    with pytest.raises(DataNotFoundError, match="--data-root"):
        resolve_data_root(tmp_path / "nowhere")


def test_data_root_without_cifar(tmp_path):
    with pytest.raises(DataNotFoundError, match="cifar-10-batches-py.*--download"):
        load_cifar(tmp_path, "cifar10", "test")


def test_env_variable_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("FCPTS_DATA_ROOT", str(tmp_path))
    assert resolve_data_root() == tmp_path


def test_corrupt_checkpoint(tmp_path):
    bad = tmp_path / "resnet20.th"
    bad.write_bytes(b"this is not a checkpoint")
    with pytest.raises(ValueError, match="corrupt"):
        load_checkpoint(cifar_resnet("resnet20"), bad)


def test_checkpoint_of_another_model(tmp_path):
    path = tmp_path / "r32.th"
    torch.save({"state_dict": cifar_resnet("resnet32").state_dict()}, path)
    with pytest.raises(
        ValueError, match=r"does not fit CifarResNet: 72 unexpected \(layer1.3.conv1.weight, .*, \.\.\.\)"
    ):
        load_checkpoint(cifar_resnet("resnet20"), path)
    other_classes = cifar_resnet("resnet20", num_classes=100).state_dict()
    torch.save(other_classes, path)
    with pytest.raises(ValueError, match=r"2 of another shape \(linear.weight \(100, 64\) for \(10, 64\), linear"):
        load_checkpoint(cifar_resnet("resnet20"), path)
    del other_classes["bn1.num_batches_tracked"]  # an old checkpoint without it still loads, as torch allows
    other_classes["linear.weight"], other_classes["linear.bias"] = torch.zeros(10, 64), torch.zeros(10)
    torch.save(other_classes, path)
    load_checkpoint(cifar_resnet("resnet20"), path)


def test_a_checkpoint_saved_under_torch_prune_names_prune_remove(tmp_path):
    """Saved with prune still on, conv1 is conv1.weight_orig and conv1.weight_mask: it read as another model's."""
    model, path = cifar_resnet("resnet20"), tmp_path / "pruned.th"
    prune.l1_unstructured(model.conv1, "weight", 0.5)
    torch.save({"state_dict": model.state_dict()}, path)
    said = r"saved with torch.nn.utils.prune .* 1 tensor\(s\) \(conv1.weight\) .*prune.remove"
    with pytest.raises(ValueError, match=said):
        load_checkpoint(cifar_resnet("resnet20"), path)
    prune.remove(model.conv1, "weight")  # as the error says: the zeros stay in the weight
    torch.save({"state_dict": model.state_dict()}, path)
    fresh = cifar_resnet("resnet20")
    load_checkpoint(fresh, path)
    assert torch.equal(fresh.conv1.weight, model.conv1.weight) and int((fresh.conv1.weight == 0).sum()) == 216


def test_cli_reports_missing_data_and_exits_2(tmp_path, capsys):
    code = task_main("cifar", ["--data-root", str(tmp_path / "absent"), "--profile", "quick"])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_rejects_unknown_method(capsys):
    assert task_main("cifar", ["--model", "resnet20", "--profile", "quick", "--methods", "magic"]) == 2
    assert "unknown method 'magic'" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"not a checkpoint", b"", b"PK\x03\x04 truncated zip"])
def test_deploy_names_a_checkpoint_that_is_no_checkpoint_in_one_line(tmp_path, capsys, content):
    from tasks.deploy.driver import main

    bad = tmp_path / "sparse.pt"
    bad.write_bytes(content)
    argv = ["--sparse-weights", str(bad), "--model", "resnet20", "--results-dir", str(tmp_path / "out")]
    assert main([*argv, "--data-root", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(bad) in err and "not a PyTorch checkpoint" in err and err.count("\n") == 1


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_a_truncated_cifar_archive_is_named_with_its_fix(tmp_path, keep):
    import lzma

    import numpy as np

    buffer = tmp_path / "arrays.npz"
    np.savez(buffer, x=np.zeros((4, 32, 32, 3), np.uint8), y=np.zeros(4, np.int64))
    whole = lzma.compress(buffer.read_bytes())
    archive = tmp_path / "cifar10" / "test.npz.xz"
    archive.parent.mkdir()
    archive.write_bytes(whole[: int(len(whole) * keep)])
    with pytest.raises(ValueError, match=re.escape(str(archive)) + " is truncated or corrupt.*restore it"):
        load_cifar(tmp_path, "cifar10", "test")
