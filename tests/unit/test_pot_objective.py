"""POT's layer loss from Gram statistics equals the loss from the layer's forward, gradients included."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from baselines.pot import POTOptions, layer_objective, pot, takes_gram
from baselines.pot_objective import (
    ForwardObjective,
    GramObjective,
    GramStack,
    NotLinearInWeights,
    gram_plan,
    layer_output,
)
from fcpts.core.masks import prunable_layers
from tests.unit.tiny import wide_cnn


class SamePadConv(nn.Conv2d):
    """Like timm's Conv2dSame: padding=0 on the module, asymmetric 'same' padding inside forward."""

    def forward(self, x):
        return F.conv2d(F.pad(x, (0, 1, 0, 1)), self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class StandardizedConv(nn.Conv2d):
    """Weight standardisation: the output is not linear in the weight."""

    def forward(self, x):
        w = self.weight - self.weight.mean(dim=(1, 2, 3), keepdim=True)
        return self._conv_forward(x, w / (w.std(dim=(1, 2, 3), keepdim=True) + 1e-5), self.bias)


LAYERS = {
    "same-pad-depthwise-stride2": (lambda: SamePadConv(6, 6, 3, stride=2, groups=6), (10, 6, 8, 8)),
    "conv3x3-stride2": (lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1), (10, 4, 9, 9)),
    "depthwise": (lambda: nn.Conv2d(6, 6, 3, padding=1, groups=6), (10, 6, 8, 8)),
    "grouped-dilated": (lambda: nn.Conv2d(4, 6, 3, padding=2, dilation=2, groups=2), (10, 4, 7, 7)),
    "pointwise": (lambda: nn.Conv2d(5, 7, 1), (10, 5, 6, 6)),
    "linear": (lambda: nn.Linear(12, 5), (10, 12)),
    "linear-tokens": (lambda: nn.Linear(12, 5), (10, 3, 12)),
}


@pytest.mark.parametrize("units", ["images", "batches"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_gram_loss_and_gradients_match_the_forward(name, units):
    make, shape = LAYERS[name]
    torch.manual_seed(0)
    layer = make().double()
    inputs = torch.randn(*shape, dtype=torch.float64)
    w_dense, b_dense = layer.weight.detach().clone(), layer.bias.detach().clone()
    keep = torch.rand_like(w_dense) > 0.6
    if units == "images":
        batches, idx = None, torch.tensor([3, 3, 7, 0, 9])  # repeats, as random batches have
    else:
        batches, idx = torch.randperm(10)[:9].view(3, 3), torch.tensor([2])  # one fixed batch per step
    results = []
    for objective in (ForwardObjective(layer, inputs, batches), GramObjective(layer, inputs, batches)):
        weight = (w_dense * keep).requires_grad_(True)
        bias = (b_dense + 0.1).requires_grad_(True)
        loss = objective.loss(idx, weight, bias, w_dense, b_dense)
        loss.backward()
        results.append(
            (
                loss.detach(),
                weight.grad,
                bias.grad,
                objective.mean_error(weight.detach(), bias.detach(), w_dense, b_dense),
                torch.tensor(
                    objective.full_loss(weight.detach(), bias.detach(), w_dense, b_dense), dtype=torch.float64
                ),
            )
        )
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    assert results[0][0] > 0


@pytest.mark.parametrize("units", ["images", "batches"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_closed_form_gradients_equal_autograds(name, units):
    """Two stacked layers of one shape: the losses and the gradients written down equal autograd's, for single
    images drawn with repeats and for POT's fixed batches (one a step)."""
    make, shape = LAYERS[name]
    torch.manual_seed(0)
    layers = [make().double(), make().double()]
    inputs = torch.randn(*shape, dtype=torch.float64)
    if units == "images":
        batches, sel = None, torch.tensor([[3, 3, 7, 0, 9], [1, 2, 2, 5, 8]])
    else:
        batches, sel = torch.randperm(10)[:9].view(3, 3), torch.tensor([[2], [0]])
    stack = GramStack([GramObjective(layer, inputs, batches) for layer in layers])
    w_dense = torch.stack([layer.weight.detach() for layer in layers])
    b_dense = torch.stack([layer.bias.detach() for layer in layers])
    keep = torch.rand_like(w_dense) > 0.6
    start_w, start_b = w_dense * keep * 1.3, b_dense + 0.1
    results = []
    for closed_form in (False, True):
        weight, bias = start_w.clone().requires_grad_(True), start_b.clone().requires_grad_(True)
        if closed_form:
            losses = stack.losses_and_gradients(sel, weight, bias, w_dense, b_dense)
        else:
            losses = stack.losses(sel, weight, bias, w_dense, b_dense)
            losses.sum().backward()
        results.append((losses.detach(), weight.grad, bias.grad))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    assert results[1][0].grad_fn is None and (results[1][0] > 0).all()
    assert results[1][1].shape == start_w.shape and results[1][2].shape == start_b.shape


def test_objectives_use_the_layers_own_forward():
    layer = SamePadConv(3, 4, 3, stride=2)
    x = torch.randn(2, 3, 8, 8)
    out = layer_output(layer, x, layer.weight * 2, layer.bias)
    assert out.shape == layer(x).shape == (2, 4, 4, 4)  # its padding, not Conv2d's padding=0
    torch.testing.assert_close(out - layer.bias.view(1, -1, 1, 1), 2 * (layer(x) - layer.bias.view(1, -1, 1, 1)))
    big = torch.randn(2, 3, 32, 32)
    assert isinstance(layer_objective(layer, big, POTOptions()), GramObjective)
    GramObjective(SamePadConv(3, 4, 3, stride=2, bias=False), big)  # timm's convs before BN have no bias
    standardized = StandardizedConv(3, 4, 3, padding=1)
    with pytest.raises(NotLinearInWeights):
        GramObjective(standardized, big)
    assert isinstance(layer_objective(standardized, big, POTOptions()), ForwardObjective)


def test_objective_choice_by_cost_and_memory():
    wide = torch.randn(4, 8, 32, 32)
    assert isinstance(layer_objective(nn.Conv2d(8, 16, 1), wide, POTOptions()), GramObjective)
    assert isinstance(layer_objective(nn.Conv2d(8, 16, 1), wide, POTOptions(gram=False)), ForwardObjective)
    plan = gram_plan(nn.Conv2d(8, 16, 1), wide, len(wide), 100, 4)
    assert plan["bytes"] == 4 * 8 * 9 * 4 and plan["gram_s"] < plan["forward_s"]
    tight = POTOptions(cache_bytes=plan["bytes"] - 1)
    assert isinstance(layer_objective(nn.Conv2d(8, 16, 1), wide, tight), ForwardObjective)
    # a classifier on pooled features has one position: its forward is cheaper
    assert isinstance(layer_objective(nn.Linear(64, 10), torch.randn(4, 64), POTOptions()), ForwardObjective)
    # the estimate ranks what was measured on the reference CPU (100 iterations of 64, ~1,000 images):
    # EfficientNet-Lite0's 16->96 1x1 conv at 112x112, forward 203 s vs Gram 0.7 s; a CIFAR ResNet 3x3
    # 64->64 conv at 8x8, forward 0.8 s vs Gram 10.3 s
    pw = gram_plan(nn.Conv2d(16, 96, 1), torch.randn(1, 16, 112, 112), 1000, 100, 64)
    dense3x3 = gram_plan(nn.Conv2d(64, 64, 3, padding=1), torch.randn(1, 64, 8, 8), 1024, 100, 64)
    assert pw["gram_s"] * 10 < pw["forward_s"] and dense3x3["forward_s"] * 3 < dense3x3["gram_s"]


def test_the_closed_form_estimate_reads_the_gram_matrices_once_and_counts_the_product():
    """In closed form a Gram iteration reads its matrices once (autograd's estimate: twice, as records made with it
    chose) and multiplies the weight change with them (out x D^2): what makes a classifier's Gram steps dearer
    than its forward (EfficientNet-Lite0's 1280 -> 1000 at one position)."""
    conv, sample = nn.Conv2d(64, 64, 3, padding=1), torch.randn(1, 64, 8, 8)
    setup = gram_plan(conv, sample, 1024, 0, 64, 64)["gram_s"]
    autograd = gram_plan(conv, sample, 1024, 1000, 64, 64)["gram_s"] - setup
    closed = gram_plan(conv, sample, 1024, 1000, 64, 64, "closed-form")["gram_s"] - setup
    product = 1000 * 2 * 64 * 576**2 / 1e11
    assert closed - product == pytest.approx(autograd / 2)
    classifier, pooled = nn.Linear(1280, 1000), torch.randn(1, 1280)
    assert not takes_gram(classifier, pooled, 1300, POTOptions(iterations=1000), 64, recomputed=False)


def test_pot_with_closed_form_and_autograd_gradients_agree():
    """The default writes a Gram objective's gradient down; records made before ran with autograd's. The same
    reconstruction up to float rounding: the same masks, weights within float32 rounding of each other."""
    net = wide_cnn()
    x = torch.randn(32, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    cfg = dict(iterations=25, batch_size=8, progress=False, lr_weight=1e-3, lr_bias=1e-3)
    assert POTOptions().gram_gradient == "closed-form" and POTOptions.DEFAULTS_BEFORE == {"gram_gradient": "autograd"}
    closed, report = pot(copy.deepcopy(net), x, 0.6, POTOptions(**cfg))
    auto, auto_report = pot(net, x, 0.6, POTOptions(gram_gradient="autograd", **cfg))
    # a Gram step costs less in closed form: the small classifier's estimate tips to it (autograd's keeps its forward)
    assert [r["objective"] for r in report.per_layer] == ["gram", "gram", "gram", "gram"]
    assert [r["objective"] for r in auto_report.per_layer] == ["gram", "gram", "gram", "forward"]
    for a, b in zip(report.per_layer, auto_report.per_layer):  # the classifier's two objectives: float32 apart
        same = a["objective"] == b["objective"]
        assert a["final_loss"] == pytest.approx(b["final_loss"], rel=1e-4 if same else 1e-3), a["name"]
    for (name, a), b in zip(prunable_layers(closed).items(), prunable_layers(auto).values()):
        assert torch.equal(a.weight != 0, b.weight != 0), name
        torch.testing.assert_close(a.weight, b.weight, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(a.bias, b.bias, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="gram_gradient"):
        POTOptions(gram_gradient="analytic").validate()


def test_pot_with_and_without_gram_statistics_agree():
    net = wide_cnn()
    x = torch.randn(32, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    cfg = dict(iterations=25, batch_size=8, progress=False, lr_weight=1e-3, lr_bias=1e-3)
    fast, report = pot(copy.deepcopy(net), x, 0.6, POTOptions(**cfg))
    slow, slow_report = pot(net, x, 0.6, POTOptions(gram=False, **cfg))  # pot changes the model it is given
    assert fast is not slow
    assert [r["objective"] for r in report.per_layer] == ["gram"] * 4
    assert [r["objective"] for r in slow_report.per_layer] == ["forward"] * 4
    for (name, a), b in zip(prunable_layers(fast).items(), prunable_layers(slow).values()):
        assert torch.equal(a.weight != 0, b.weight != 0), name
        torch.testing.assert_close(a.weight, b.weight, rtol=1e-3, atol=1e-5)
        torch.testing.assert_close(a.bias, b.bias, rtol=1e-3, atol=1e-5)


def repeated_blocks():
    """Three 8->8 convs of one shape (stackable), between layers of other shapes."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        *[m for _ in range(3) for m in (nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())],
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    ).eval()


@pytest.mark.parametrize("early_stop_loss", [1e-5, 0.05])
def test_stacked_layers_follow_their_sequential_trajectories(early_stop_loss):
    """Layers of one shape take their steps together; each ends where it ends alone, early stops included."""
    x = torch.randn(48, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    cfg = dict(iterations=30, batch_size=16, progress=False, lr_weight=1e-3, lr_bias=1e-3)
    together, report = pot(repeated_blocks(), x, 0.7, POTOptions(early_stop_loss=early_stop_loss, **cfg))
    alone, alone_report = pot(
        repeated_blocks(), x, 0.7, POTOptions(early_stop_loss=early_stop_loss, concurrent=False, **cfg)
    )
    assert [r["stacked_layers"] for r in report.per_layer] == [1, 3, 3, 3, 1]
    assert all(r["stacked_layers"] == 1 for r in alone_report.per_layer)
    for a, b in zip(report.per_layer, alone_report.per_layer):
        assert a["iterations"] == b["iterations"], a["name"]
        assert a["final_loss"] == pytest.approx(b["final_loss"], rel=1e-4), a["name"]
    if early_stop_loss > 1e-3:  # some layers stop early, at different steps, while others go on
        assert len({r["iterations"] for r in report.per_layer}) > 1
    for (name, a), b in zip(prunable_layers(together).items(), prunable_layers(alone).values()):
        assert torch.equal(a.weight != 0, b.weight != 0), name
        torch.testing.assert_close(a.weight, b.weight, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(a.bias, b.bias, rtol=1e-4, atol=1e-6)


def test_layers_of_equal_statistics_but_other_output_widths_are_not_stacked():
    """Two 1x1 convs reading 8 channels share a Gram shape but not a weight shape (EfficientNet's
    projections): each is its own problem, and POT runs."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 1), nn.ReLU(), nn.Conv2d(8, 12, 1)
    ).eval()
    x = torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    _, report = pot(net, x, 0.5, POTOptions(iterations=5, batch_size=8, progress=False))
    assert [r["stacked_layers"] for r in report.per_layer] == [1, 1, 1]
