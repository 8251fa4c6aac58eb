"""The model-coverage benchmark tells a cell that reached the target from one the suite refused with a reason, one
that ran past its limit, and one that failed inside torch (a bug it must not hide)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fcpts
from benchmarks.code import model_coverage
from benchmarks.code.model_coverage import Model, measure, refused_by_the_suite, run_cell
from tests.unit.tiny import tiny_net


class AppliesItsOwnWeight(nn.Module):
    """A model whose forward reads a Linear's weight itself (as torchvision's Swin attention does)."""

    def __init__(self):
        super().__init__()
        self.conv, self.inner = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 4)

    def forward(self, x):
        return F.linear(self.conv(x).mean((2, 3)), self.inner.weight)


def test_a_refusal_of_the_suite_is_told_from_an_error_inside_torch():
    with pytest.raises(TypeError) as refusal:
        fcpts.sparsify(tiny_net(), torch.randn(4, 3, 8, 8).double(), 0.5)
    with pytest.raises(ValueError) as inside_torch:  # a ValueError too, but torch's own
        torch.cat([])
    assert refused_by_the_suite(refusal.value) and not refused_by_the_suite(inside_torch.value)


def test_each_outcome_of_a_cell(monkeypatch):
    assert run_cell(tiny_net, 8, "global-magnitude", 60)[0] == "ok"
    outcome, detail = run_cell(AppliesItsOwnWeight, 8, "pot-l2norm", 60)
    assert outcome == "refused" and "never calls 1 of its layers (e.g. ['inner'])" in detail

    def broken(*args, **kwargs):
        return torch.cat([])  # an error the suite did not mean: the benchmark must call it a failure

    monkeypatch.setattr(fcpts, "sparsify", broken)
    assert run_cell(tiny_net, 8, "fcpts", 60) == (
        "failed",
        "ValueError: torch.cat(): expected a non-empty list of Tensors",
    )


def test_a_cell_past_its_limit_is_stopped(monkeypatch):
    def slow(*args, **kwargs):
        while True:
            torch.zeros(1)

    monkeypatch.setattr(fcpts, "sparsify", slow)
    assert run_cell(tiny_net, 8, "fcpts", 1) == ("over the limit", "1 s")


def test_the_output_counts_the_outcomes_and_the_weights(monkeypatch):
    monkeypatch.setattr(Model, "build", lambda self: tiny_net())
    lines = measure((Model("torchvision", "tiny", 8),), ["global-magnitude", "uniform"], 60)
    assert lines[1].startswith("cells: 2 ok (the exact target; STR what its search reached), 0 refused")
    assert lines[2].startswith("torchvision tiny at 8 px: 824 weights in 3 layers pruned (3 before the attention swap)")
    assert lines[2].endswith("in layers no method prunes: none")
    assert [line.split()[:2] for line in lines[3:]] == [["global-magnitude", "ok"], ["uniform", "ok"]]
    assert model_coverage.MODELS  # the committed run's models are listed in one place
