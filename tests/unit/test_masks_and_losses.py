"""The threshold mask's straight-through gradient and the control loss's gradient sign."""

import functools

import pytest
import torch
from torch import nn

import fcpts
from fcpts.core import flat_weights
from fcpts.core.bridge import LayerBridges
from fcpts.core.masks import hard_mask, threshold_mask
from fcpts.methods import thresholds
from tests.unit.tiny import untimed


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
    t = torch.sigmoid(thresholds.initial_score(w, 0.4).float())
    assert int((w.abs() < t).sum()) == 2


@pytest.mark.parametrize("current,expected_sign", [(0.95, +1), (0.5, -1)])
def test_control_loss_gradient_sign(current, expected_sign):
    """Too sparse -> dLc/dt > 0 (descent lowers t, unprunes); not sparse enough -> dLc/dt < 0."""
    w = torch.linspace(-1, 1, 1001)
    t = torch.quantile(w.abs(), current).clone().requires_grad_(True)
    r = LayerBridges([w.numel()])(t.reshape(1), [w])
    loss = (r - 0.8).abs()
    loss.backward()
    assert torch.sign(t.grad).item() == expected_sign


def _runs_with_and_without_masking_together(monkeypatch, method: str, **options):
    import fcpts
    from tests.unit.tiny import tiny_net

    x = torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    runs = []
    for together in (True, False):
        if not together:
            monkeypatch.setattr(thresholds.MaskedTogether, "applies", staticmethod(lambda layers, params: False))
        model, report = fcpts.get_method(method)(
            tiny_net(), x, 0.6, iterations=6, batch_size=8, progress=False, **options
        )
        runs.append((model.state_dict(), untimed(report.history)))
    return runs


@pytest.mark.parametrize(
    "method, options, limit",
    [
        ("fcpts", {}, None),
        ("fcpts", {}, 300),
        ("fcpts", {"channels_last": False, "reconstruction": "kl"}, None),
        ("fcpts-plus", {}, None),
    ],
)
def test_masking_every_layer_at_once_changes_no_bit(monkeypatch, method, options, limit):
    """FCPTS masks all layers' weights as one flat tensor inside each forward (a few kernels, not a few per layer),
    or runs of layers of at most `limit` weights: the trained weights and every logged loss are those of masking
    layer by layer, bit for bit."""
    if limit is not None:
        monkeypatch.setattr(thresholds, "runs_of", functools.partial(flat_weights.runs_of, limit=limit))
    (together, together_history), (alone, alone_history) = _runs_with_and_without_masking_together(
        monkeypatch, method, **options
    )
    assert together_history == alone_history
    assert all(torch.equal(a, b) for a, b in zip(together.values(), alone.values()))


def test_masking_together_computes_each_elementwise_step_once_for_all_layers():
    """One forward of a student whose layers are masked together takes sgn(|W| - t) once for all of them, not once a
    layer; outside a forward each layer masks its own weight, to the same values."""
    from tests.unit.tiny import tiny_net

    model = tiny_net()
    layers = {n: m for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))}
    params = thresholds.attach(layers, {n: 0.5 for n in layers}, threshold_grad=False)
    together = thresholds.MaskedTogether(model, layers, params)
    x = torch.randn(2, 3, 8, 8)
    with torch.profiler.profile() as prof:
        model(x)
    signs = sum(e.count for e in prof.key_averages() if e.key == "aten::sign")
    assert len(layers) == 3 and signs == 1
    inside = []
    head = list(layers.values())[-1]  # read inside the forward: the masks made together
    head.register_forward_pre_hook(lambda *_: inside.extend(layer.weight for layer in layers.values()))
    model(x)
    together.remove()
    assert len(inside) == 3 and all(torch.equal(a, layer.weight) for a, layer in zip(inside, layers.values()))


def test_every_threshold_taken_at_once_is_each_layers_own_bit_for_bit():
    """The masks of all layers take their thresholds from one sigmoid over all scores, equal to each layer's own
    `threshold()`, so the masks are those of masking layer by layer. A plain sigmoid of the stacked scores would be
    vectorised on a CPU and differ in the last bit for some of 40."""
    scores = [s.clone() for s in torch.empty(40).uniform_(-8, -1, generator=torch.Generator().manual_seed(0))]
    ours = thresholds.each_threshold(scores)
    assert torch.equal(ours, torch.stack([torch.sigmoid(s) for s in scores]))


def test_masks_of_many_layers_at_once_equal_each_layers_mask():
    """On 40 layers (beyond a CPU's vector width), every masked weight made at once equals its layer's own."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(12, 12) for _ in range(40)])
    layers = dict(model.named_children())
    params = thresholds.attach(layers, {n: 0.3 + 0.01 * i for i, n in enumerate(layers)}, threshold_grad=False)
    for p in params.values():
        p.score.data += torch.randn(()) * 0.3  # thresholds no longer midway between two weights
    alone = [layer.weight for layer in layers.values()]
    together = thresholds.MaskedTogether(model, layers, params)
    inside = []
    model[-1].register_forward_pre_hook(lambda *_: inside.extend(layer.weight for layer in layers.values()))
    model(torch.randn(2, 12))
    together.remove()
    assert len(inside) == 40 and all(torch.equal(a, b) for a, b in zip(inside, alone))


def test_every_blocks_mse_at_once_equals_the_sum_block_by_block():
    """FCPTS's block losses are taken at once: the value is the sum of each block's own (to rounding), the
    gradient into each student block output the same bit for bit, a channels-last block and an overwritten teacher
    output included."""
    from fcpts.methods.fcpts import BlocksMSE

    g = torch.Generator().manual_seed(0)
    shapes = [(2, 4, 8, 8), (2, 8, 4, 4), (2, 10)]
    students = [torch.randn(s, generator=g).requires_grad_() for s in shapes]
    teachers = [torch.randn(s, generator=g) for s in shapes]
    students[0].data = students[0].data.contiguous(memory_format=torch.channels_last)
    ref = 0.37 * sum(BlocksMSE()({"b": s}, {"b": t.clone()}, set()) for s, t in zip(students, teachers))
    ref_grads = torch.autograd.grad(ref, students)
    given = {str(k): t.clone() for k, t in enumerate(teachers)}
    ours = 0.37 * BlocksMSE()({str(k): s for k, s in enumerate(students)}, given, sole={"0", "2"})
    grads = torch.autograd.grad(ours, students)
    assert given == {}  # every teacher output popped
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=0)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads))


def test_thresholds_take_one_optimiser_step_for_all_with_each_ones_values(monkeypatch):
    """The thresholds' SGD steps all at once (foreach); the run is the one of stepping each on its own, bit for bit."""
    from tests.unit.tiny import tiny_images, tiny_net

    def run():
        model, report = fcpts.get_method("fcpts")(
            tiny_net(), tiny_images(), 0.6, iterations=4, batch_size=8, progress=False
        )
        return model.state_dict(), untimed(report.history)

    together = run()

    class EachOnItsOwn(torch.optim.SGD):
        def __init__(self, groups, **options):
            super().__init__([{**group, "foreach": False} for group in groups], **options)

    monkeypatch.setattr(torch.optim, "SGD", EachOnItsOwn)
    alone = run()
    assert together[1] == alone[1]
    assert all(torch.equal(a, b) for a, b in zip(together[0].values(), alone[0].values()))
