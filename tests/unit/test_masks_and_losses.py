"""The threshold mask's straight-through gradient and the control loss's gradient sign."""

import pytest
import torch
from torch import nn

from fcpts.core.bridge import Bridge
from fcpts.core.masks import hard_mask, threshold_mask
from fcpts.methods import thresholds


def test_mask_forward_is_step_of_magnitude():
    w = torch.tensor([-0.3, -0.1, 0.0, 0.05, 0.2, 0.1])
    m = threshold_mask(w, torch.tensor(0.1))
    assert m.tolist() == [1.0, 0.5, 0.0, 0.0, 1.0, 0.5]  # sgn(0) = 0 at an exact tie
    assert hard_mask(w, 0.1).tolist() == [True, True, False, False, True, True]  # ties kept


def test_straight_through_gradient_into_threshold():
    """dM/dt = -0.5 where ||W| - t| < 1 (hard-tanh STE of sgn), 0 outside; |W| gets nothing."""
    w = torch.tensor([0.0, 0.05, 0.5, 3.0], requires_grad=True)
    t = torch.tensor(0.1, requires_grad=True)
    upstream = torch.tensor([1.0, 2.0, 3.0, 4.0])
    (threshold_mask(w, t) * upstream).sum().backward()
    assert t.grad.item() == pytest.approx(-0.5 * (1 + 2 + 3))  # |3.0 - 0.1| >= 1: clipped
    assert w.grad is None or torch.all(w.grad == 0)


def test_parametrized_weight_gradient_is_masked():
    """Through W * M the weights receive grad * M: pruned weights are never revived by reconstruction."""
    layer = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[0.01, -0.02, 0.5, -0.7]]))
    thresholds.attach({"l": layer}, {"l": 0.5}, threshold_grad=False)
    layer(torch.ones(1, 4)).sum().backward()
    grad = layer.parametrizations.weight.original.grad
    assert grad.tolist() == [[0.0, 0.0, 1.0, 1.0]]
    assert layer.parametrizations.weight[0].score.grad is None


def test_initial_threshold_prunes_exactly_k():
    w = torch.tensor([0.3, 0.1, 0.2, 0.4, 0.5])
    t = torch.sigmoid(torch.tensor(thresholds.initial_score(w, 0.4)))
    assert int((w.abs() < t).sum()) == 2


@pytest.mark.parametrize("current,expected_sign", [(0.95, +1), (0.5, -1)])
def test_control_loss_gradient_sign(current, expected_sign):
    """Too sparse -> dLc/dt > 0 (descent lowers t, unprunes); not sparse enough -> dLc/dt < 0."""
    w = torch.linspace(-1, 1, 1001)
    t = torch.quantile(w.abs(), current).clone().requires_grad_(True)
    r = Bridge(w.numel())(t, w)
    loss = (r - 0.8).abs()
    loss.backward()
    assert torch.sign(t.grad).item() == expected_sign
