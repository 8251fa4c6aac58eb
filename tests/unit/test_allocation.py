"""Allocations on hand-checked examples and exact global counts on adversarial cases."""

import pytest
import torch
from torch import nn

from fcpts.core import allocation
from fcpts.core.masks import prunable_layers


def three_layers():
    model = nn.Sequential()
    model.add_module("a", nn.Linear(2, 2))  # n = 4,   raw (2+2)/4 = 1.0
    model.add_module("b", nn.Linear(10, 10))  # n = 100, raw 20/100 = 0.2
    model.add_module("c", nn.Conv2d(10, 10, 3))  # n = 900, raw 26/900
    return model


def test_erk_by_hand_with_a_layer_forced_dense():
    """Target 0.8 over N = 1004. First pass: eps = 200.8 / 50 = 4.016 makes layer a's density 4.016 > 1,
    so a goes dense and eps = (0.2 * 1000 - 0.8 * 4) / 46 = 196.8 / 46 for b and c."""
    rates = allocation.erk_rates(prunable_layers(three_layers()), 0.8)
    eps = 196.8 / 46
    assert rates["a"] == 0.0
    assert rates["b"] == pytest.approx(1 - 0.2 * eps, abs=1e-12)
    assert rates["c"] == pytest.approx(1 - 26 / 900 * eps, abs=1e-12)
    zeros = rates["b"] * 100 + rates["c"] * 900
    assert zeros == pytest.approx(0.8 * 1004)


def test_erk_respects_layers_kept_dense_by_the_user():
    layers = prunable_layers(three_layers(), exclude=["c"])
    assert set(layers) == {"a", "b"}
    rates = allocation.erk_rates(layers, 0.5)
    assert sum(rates[n] * layers[n].weight.numel() for n in layers) == pytest.approx(0.5 * 104)


def test_rates_to_counts_hits_target_exactly():
    layers = prunable_layers(three_layers())
    rates = allocation.erk_rates(layers, 0.8)
    counts = allocation.rates_to_counts(rates, {n: m.weight.numel() for n, m in layers.items()}, 0.8)
    assert counts == {"a": 0, "b": 14, "c": 789}  # floors 0/14/788, remainder 1 to c (.765 > .435)
    masks = allocation.keep_masks_for_rates(layers, rates, 0.8)
    assert sum(int((~m).sum()) for m in masks.values()) == round(0.8 * 1004)


def test_global_cut_with_ties_prunes_exactly_k():
    scores = {"x": torch.ones(3), "y": torch.ones(2)}
    masks = allocation.global_keep_masks(scores, 0.4)
    assert sum(int((~m).sum()) for m in masks.values()) == 2
    assert masks["x"].tolist() == [False, False, True]  # ties broken by position, deterministically


@pytest.mark.parametrize("target", [0.0, 0.3, 0.5, 0.999])
def test_global_cut_on_tiny_layers(target):
    scores = {"one": torch.tensor([0.5]), "two": torch.tensor([0.1, 0.9]), "big": torch.rand(97)}
    masks = allocation.global_keep_masks(scores, target)
    assert sum(int((~m).sum()) for m in masks.values()) == round(target * 100)


def test_lamp_scores_by_hand():
    scores = allocation.lamp_scores(torch.tensor([3.0, 1.0, 2.0]))
    # sorted squares 1, 4, 9; suffix sums 14, 13, 9
    assert scores.tolist() == pytest.approx([1.0, 1 / 14, 4 / 13])


def test_l2norm_scores_are_scale_free():
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    with torch.no_grad():
        b.weight.copy_(a.weight * 100)
    s = allocation.l2norm_scores({"a": a, "b": b})
    assert torch.allclose(s["a"], s["b"])


def test_rate_masks_count_weights_that_are_already_zero():
    """Pretrained weights can hold exact zeros (EfficientNet-Lite0 does); a layer kept dense by its rate
    still contributes them, so the other layers prune fewer and the model ends exactly at the target."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 10))
    with torch.no_grad():
        net[0].weight[:3] = 0.0  # 30 zeros in a layer the rates keep dense
    layers = {"0": net[0], "1": net[1]}
    masks = allocation.keep_masks_for_rates(layers, {"0": 0.0, "1": 0.8}, target=0.4)
    zeros = sum(int(((m.weight * masks[n]) == 0).sum()) for n, m in layers.items())
    assert zeros == 80  # round(0.4 * 200): 30 existing + 50 pruned, not 30 + 80
    assert sum(int((~m).sum()) for m in masks.values()) == 80  # the masks say so themselves
    # the existing zeros sit outside the mask even in the layer kept dense, so a method that rewrites
    # kept weights (POT's weight correction) cannot revive them
    assert torch.equal(masks["0"], net[0].weight != 0)


def _sorted_keep(scores: list[torch.Tensor], k: int, tiebreak: list[torch.Tensor] | None) -> list[torch.Tensor]:
    """The reference: stable sorts of the concatenated float32 scores (by tiebreak, then by score)."""
    flat = torch.cat([s.flatten().float() for s in scores])
    keep = torch.ones(flat.numel(), dtype=torch.bool)
    if tiebreak is None:
        order = torch.sort(flat, stable=True).indices
    else:
        first = torch.sort(torch.cat([t.flatten().float() for t in tiebreak]), stable=True).indices
        order = first[torch.sort(flat[first], stable=True).indices]
    keep[order[:k]] = False
    return list(keep.split([s.numel() for s in scores]))


@pytest.mark.parametrize("with_tiebreak", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_lowest_k_without_concatenating_equals_the_stable_sorts(seed, with_tiebreak):
    """Heavy ties (few distinct values), -0.0 beside 0.0, negative scores, a float64 input, an empty tensor and
    every k at the ties' edges: the masks equal the stable sorts' exactly."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(7, 3), (0,), (50,), (4, 2, 3)]
    scores = [torch.randint(-3, 4, s, generator=g).float() * 0.5 for s in shapes]
    scores[0][0, :2] = torch.tensor([-0.0, 0.0])
    scores[2] = scores[2].double() + torch.rand(50, generator=g, dtype=torch.float64) * 1e-9  # equal as float32
    tiebreak = [torch.randint(0, 3, s, generator=g).float() for s in shapes] if with_tiebreak else None
    total = sum(s.numel() for s in scores)
    for k in sorted({0, 1, 2, total // 3, total // 2, total - 1, total, *range(10, total, 17)}):
        got = allocation.lowest_k_keep(scores, k, tiebreak)
        want = _sorted_keep(scores, k, tiebreak)
        assert [m.shape for m in got] == [s.shape for s in scores]
        assert all(torch.equal(a.flatten(), b) for a, b in zip(got, want)), k
    with pytest.raises(ValueError, match="cannot prune"):
        allocation.lowest_k_keep(scores, total + 1)


@pytest.mark.parametrize("seed", range(4))
def test_lowest_k_over_the_whole_float_range_equals_the_stable_sorts(seed):
    """Values spread over every exponent, both infinities, NaN (last, as a sort puts it) and the extremes: the
    selection's counting passes land on the same k-th score as the sorts, k by k."""
    g = torch.Generator().manual_seed(seed)
    scores = [
        torch.randn(s, generator=g) * torch.exp2(torch.randint(-126, 127, (s,), generator=g)) for s in (300, 1, 77)
    ]
    extremes = [float("inf"), float("-inf"), float("nan"), 3.4e38, -3.4e38, 1e-45, -1e-45, 0.0, -0.0]
    scores[0][: len(extremes)] = torch.tensor(extremes)
    total = sum(s.numel() for s in scores)
    for k in sorted({1, 2, total // 2, total - 2, total - 1, total, *range(5, total, 23)}):
        got = allocation.lowest_k_keep(scores, k)
        assert all(torch.equal(a.flatten(), b) for a, b in zip(got, _sorted_keep(scores, k, None))), k
