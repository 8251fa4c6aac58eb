"""`--all-methods` adds the declared methods beyond the paper on CIFAR and ImageNet, and says so in `--help`;
detection keeps the paper's set (parsing only, nothing runs)."""

import pytest

from fcpts.methods import get_method
from tasks.cifar import grid as cifar
from tasks.detection import grid as detection
from tasks.grid.cli import EXTRA_METHODS
from tasks.imagenet import grid as imagenet


def test_extra_methods_are_registered_and_not_the_papers():
    assert "obs" in EXTRA_METHODS
    assert all(not get_method(m).in_paper for m in EXTRA_METHODS)  # a paper method is never labelled an extra


def test_cifar_all_methods_is_the_papers_set_then_the_extras():
    assert cifar.parse_args(["--all-methods"]).methods == [*cifar.PAPER_METHODS, *EXTRA_METHODS]
    assert cifar.parse_args(["--methods", "fcpts"]).methods == ["fcpts"]


def test_imagenet_all_methods_adds_the_extras_for_every_model(monkeypatch):
    monkeypatch.setattr(imagenet, "build_grid", lambda *, model_name, **_: model_name)  # no data read
    args = imagenet.parse_args(["--all-methods", "--models", "efficientnet_lite0", "vit_base", "--device", "cpu"])
    plans = {plan.grid: list(plan.methods) for plan in imagenet.plans(args)}
    assert plans["efficientnet_lite0"] == ["pot-l2norm", "pot-erk", "probmask", "fcpts", *EXTRA_METHODS]
    assert plans["vit_base"] == ["pot-l2norm", "pot-erk", "fcpts", *EXTRA_METHODS]


def test_detection_all_methods_stays_the_papers_set():
    assert detection.parse_args(["--all-methods"]).methods == ["pot-l2norm", "pot-erk", "fcpts"]


@pytest.mark.parametrize("parse", [cifar.parse_args, imagenet.parse_args])
def test_help_says_what_all_methods_runs(parse, capsys):
    with pytest.raises(SystemExit):
        parse(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"beyond the paper (tables label them so): {' '.join(EXTRA_METHODS)}" in text
