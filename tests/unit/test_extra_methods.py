"""`--all-methods` is the registry's set of the task, the paper's methods first, then those beyond the paper (on
CIFAR and ImageNet; detection keeps the paper's set), and `--help` says so (parsing only, nothing runs)."""

import pytest

from fcpts.methods import get_method, list_methods
from tasks.cifar import grid as cifar
from tasks.imagenet import grid as imagenet
from tasks.voc import grid as detection

PAPER_SET = ["pot-l2norm", "pot-erk", "fcpts"]  # the paper's Tables 1, 3, 4
EXTRAS = ["magnitude-bn", "obs", "fcpts-plus"]  # beyond the paper, run by the classification tasks
VIT_EXTRAS = ["obs", "fcpts-plus"]  # a ViT has no BatchNorm to re-estimate


def test_the_extras_are_registered_and_not_the_papers():
    assert [m for m in list_methods(task="cifar") if not get_method(m).in_paper] == EXTRAS


def test_cifar_all_methods_is_the_papers_set_then_the_extras():
    assert cifar.parse_args(["--all-methods"]).methods == [*PAPER_SET, *EXTRAS] == list_methods(task="cifar")
    assert cifar.parse_args(["--methods", "fcpts"]).methods == ["fcpts"]


def test_imagenet_all_methods_adds_the_extras_for_every_model(monkeypatch):
    monkeypatch.setattr(imagenet, "build_grid", lambda *, model_name, **_: model_name)  # no data read
    args = imagenet.parse_args(["--all-methods", "--models", "efficientnet_lite0", "vit_base", "--device", "cpu"])
    plans = {plan.grid: list(plan.methods) for plan in imagenet.plans(args)}
    assert plans["efficientnet_lite0"] == ["pot-l2norm", "pot-erk", "probmask", "fcpts", *EXTRAS]
    assert plans["vit_base"] == [*PAPER_SET, *VIT_EXTRAS]


def test_detection_all_methods_stays_the_papers_set():
    assert detection.parse_args(["--all-methods"]).methods == PAPER_SET


@pytest.mark.parametrize("parse", [cifar.parse_args, imagenet.parse_args])
def test_help_says_what_all_methods_runs(parse, capsys):
    with pytest.raises(SystemExit):
        parse(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"beyond the paper (tables label them so): {' '.join(EXTRAS)}" in text
