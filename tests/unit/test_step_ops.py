"""The operator-count benchmark: a per-step count that does not depend on the number of steps, views left out,
and an FCPTS step that dispatches more operators than a plain step of the same model."""

import torch
from torch import nn

from benchmarks.speed import step_ops


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))


def test_a_plain_step_counts_the_same_per_step_whatever_the_number_of_steps():
    x = torch.randn(2, 3, 8, 8)
    one, two = (
        step_ops.per_step(step_ops.plain_steps(tiny(), x), 1),
        step_ops.per_step(step_ops.plain_steps(tiny(), x), 2),
    )
    assert one == two and sum(one.values()) > 0
    assert "aten::conv2d" in one and "aten::convolution_backward" in one and not set(one) & step_ops.NO_KERNEL


def test_views_and_no_op_casts_are_not_counted_but_real_work_is():
    x = torch.randn(4, 4)
    ops = step_ops.top_level_ops(lambda: (x.view(16), x.t(), x.to(torch.float32), x.to(torch.float64), x + 1))
    assert ops == {"aten::to": 1, "aten::add": 1}  # the cast to float64 copies, the one to float32 does nothing


def test_an_fcpts_step_dispatches_more_operators_than_a_plain_step():
    x = torch.randn(2, 3, 8, 8)
    plain = sum(step_ops.per_step(step_ops.plain_steps(tiny(), x), 1).values())
    fcpts = sum(step_ops.per_step(step_ops.sparsify_steps(tiny(), x), 1).values())
    assert fcpts > plain
