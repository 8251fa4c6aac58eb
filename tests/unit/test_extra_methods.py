"""Each grid's `--all-methods` is its method set (tasks.grid.layout): CIFAR's, ImageNet's per model (a ViT's
for ViTs), detection's; and `--help` says what it runs (parsing only, nothing runs)."""

import pytest

from tasks.cifar import grid as cifar
from tasks.grid.layout import all_methods, extra_methods
from tasks.imagenet import grid as imagenet
from tasks.voc import grid as detection


def test_each_grid_runs_its_method_set():
    assert cifar.parse_args(["--all-methods"]).methods == all_methods("cifar")
    assert cifar.parse_args(["--methods", "fcpts"]).methods == ["fcpts"]
    assert detection.parse_args(["--all-methods"]).methods == all_methods("voc")


def test_imagenet_all_methods_follows_each_model(monkeypatch):
    monkeypatch.setattr(imagenet, "build_grid", lambda *, model_name, **_: model_name)  # no data read
    args = imagenet.parse_args(["--all-methods", "--models", "efficientnet_lite0", "vit_base", "--device", "cpu"])
    plans = {plan.grid: list(plan.methods) for plan in imagenet.plans(args)}
    assert plans == {"efficientnet_lite0": all_methods("imagenet-cnn"), "vit_base": all_methods("imagenet-vit")}
    assert plans["efficientnet_lite0"] != plans["vit_base"]


@pytest.mark.parametrize("parse, grid", [(cifar.parse_args, "cifar"), (imagenet.parse_args, "imagenet-cnn")])
def test_help_says_what_all_methods_runs(parse, grid, capsys):
    with pytest.raises(SystemExit):
        parse(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"beyond the paper (tables label them so): {' '.join(extra_methods(grid))}" in text
