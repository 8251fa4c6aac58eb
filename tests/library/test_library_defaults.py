"""The library's defaults fit the call: every registered method, run on the README Quickstart's model and data with
no budget given, finishes in a budget fitted to its 128 images (not the paper's ImageNet budget) and lands on the
exact target (within its documented tolerance: STR's), or its report says first that it did not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import fcpts
from fcpts.core.options import epochs_budget

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart():
    """The Quickstart's model builder and calibration data, as the README defines them (its code before the first
    `sparsify`)."""
    code = re.search(r"## Quickstart\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    scope: dict = {}
    torch.manual_seed(0)
    exec(code.split("sparse, report")[0], scope)
    return scope["my_model"], scope["calibration"]


def test_the_default_budget_is_the_papers_on_its_data_and_scales_down_with_fewer_images():
    assert epochs_budget(1024, 64, 100, 1600) == 1600  # FCPTS: 100 epochs of the paper's 1,024 images
    assert epochs_budget(10240, 64, 125, 20_000) == 20_000  # POT: msbench's 20,000 steps on 10,240 images
    assert epochs_budget(128, 64, 100, 1600) == 200 and epochs_budget(100_000, 64, 100, 1600) == 1600
    assert epochs_budget(8, 64, 100, 1600) == 100  # fewer images than a batch: one batch an epoch


@pytest.mark.parametrize("name", list(fcpts.METHODS))
def test_every_method_under_its_defaults_lands_on_the_target_or_says_first_it_did_not(name):
    my_model, calibration = quickstart()
    sparse, report = fcpts.sparsify(my_model(), calibration, 0.9, method=name, progress=False)
    achieved, per_layer = fcpts.sparsity_summary(sparse)
    n = sum(row["numel"] for row in per_layer)
    landed = round(achieved * n) == round(0.9 * n) or abs(achieved - 0.9) <= report.tolerance  # STR's: 0.5%
    first = report.summary().splitlines()[0]
    assert landed != first.startswith("MISSED THE TARGET"), first
    iterations = report.options.get("iterations")
    assert iterations is None or iterations <= 250, iterations  # fitted to 128 images: 200 steps, POT 250 a layer
