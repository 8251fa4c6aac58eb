"""Each grid's `--all-methods` is its method set (tasks.grid.layout): CIFAR's, ImageNet's per model (a ViT's
for ViTs), detection's (parsing only, nothing runs)."""

from tasks.grid.cli import parse_args
from tasks.grid.layout import all_methods
from tasks.imagenet import grid as imagenet


def test_each_grid_runs_its_method_set():
    assert parse_args("cifar", ["--all-methods"]).methods == all_methods("cifar")
    assert parse_args("cifar", ["--methods", "fcpts"]).methods == ["fcpts"]
    assert parse_args("voc", ["--all-methods"]).methods == all_methods("voc")


def test_imagenet_all_methods_follows_each_model(monkeypatch):
    monkeypatch.setattr(imagenet, "build_grid", lambda *, model_name, **_: model_name)  # no data read
    args = parse_args("imagenet", ["--all-methods", "--models", "efficientnet_lite0", "vit_base", "--device", "cpu"])
    plans = {plan.grid: list(plan.methods) for plan in imagenet.plans(args)}
    assert plans == {"efficientnet_lite0": all_methods("imagenet-cnn"), "vit_base": all_methods("imagenet-vit")}
    assert plans["efficientnet_lite0"] != plans["vit_base"]
