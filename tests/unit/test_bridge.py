"""The bridge function r(t) and its density-based derivative."""

import functools
import math

import pytest
import torch

from fcpts.core import bridge, flat_weights
from fcpts.core.bridge import LayerBridges, batched_kde_density, histogram_density, kde_density


def normal_pdf(x, sigma):
    return math.exp(-0.5 * (x / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))


@pytest.fixture
def gaussian_weights():
    g = torch.Generator().manual_seed(0)
    return torch.randn(200_000, generator=g) * 0.05  # sigma = 0.05, a typical conv weight scale


def test_forward_is_exact_fraction_below_threshold(gaussian_weights):
    w = gaussian_weights
    t = torch.tensor(0.03)
    r = LayerBridges([w.numel()])(t.reshape(1), [w])
    assert r.item() == pytest.approx((w.abs() < 0.03).float().mean().item(), abs=0)


@pytest.mark.parametrize("t", [0.01, 0.05, 0.1])
def test_kde_derivative_matches_analytic_density(gaussian_weights, t):
    """With many points and a narrow kernel, dr/dt -> p(t) + p(-t) = 2 * N(t; 0, sigma^2)."""
    w, sigma = gaussian_weights, 0.05
    thr = torch.tensor(t, requires_grad=True)
    one_layer = LayerBridges(
        [w.numel()], points=20_000, bandwidth_scale=0.1, generator=torch.Generator().manual_seed(1)
    )
    one_layer(thr.reshape(1), [w]).backward()
    assert thr.grad.item() == pytest.approx(2 * normal_pdf(t, sigma), rel=0.05)


@pytest.mark.parametrize("t", [0.01, 0.05, 0.1])
def test_default_kde_is_the_gaussian_smoothed_density(gaussian_weights, t):
    """The default (100 points, h = 0.5 std) estimates N(0, sigma^2 (1 + 0.25)): a known smoothing bias,
    checked against that analytic density with a tolerance for the 100-point sample's noise."""
    w, sigma = gaussian_weights, 0.05
    smoothed = sigma * math.sqrt(1 + 0.5**2)
    estimates = []
    for seed in range(20):
        thr = torch.tensor(t, requires_grad=True)
        LayerBridges([w.numel()], generator=torch.Generator().manual_seed(seed))(thr.reshape(1), [w]).backward()
        estimates.append(thr.grad.item())
    mean = sum(estimates) / len(estimates)
    assert mean == pytest.approx(2 * normal_pdf(t, smoothed), rel=0.06)


def test_kde_density_integrates_to_one():
    pts = torch.tensor([-1.0, 0.0, 2.0])
    xs = torch.linspace(-8, 10, 20001)
    dens = kde_density(pts, xs, 0.5)
    assert torch.trapezoid(dens, xs).item() == pytest.approx(1.0, abs=1e-4)


def test_histogram_derivative_is_close_to_density(gaussian_weights):
    w, sigma = gaussian_weights, 0.05
    thr = torch.tensor(0.05, requires_grad=True)
    LayerBridges([w.numel()], method="histogram")(thr.reshape(1), [w]).backward()
    assert thr.grad.item() == pytest.approx(2 * normal_pdf(0.05, sigma), rel=0.05)


def test_histogram_density_is_zero_outside_range():
    vals = torch.tensor([0.0, 1.0, 2.0])
    assert histogram_density(vals, torch.tensor([5.0, -1.0])).tolist() == [0.0, 0.0]


def reference_global_sparsity(thresholds, weights, method, generator, points=100, scale=0.5, bins=100):
    """The global sparsity as FCPTS summed it before the layers were batched: each layer's own bridge with its
    own sample (drawn in layer order), weighted by its size; gradients by autograd through the densities."""
    total = sum(w.numel() for w in weights)
    out = 0
    for t, w in zip(thresholds, weights):
        flat = w.detach().flatten()
        sample = None if points >= flat.numel() else torch.randperm(flat.numel(), generator=generator)[:points]
        pts = flat if sample is None else flat[sample]
        below = (flat.abs() < t.detach()).float().mean()
        at = torch.stack([t.detach(), -t.detach()])
        if method == "kde":
            density = kde_density(pts, at, (scale * flat.std()).clamp_min(1e-12)).sum()
        else:
            lo, hi = flat.min().item(), flat.max().item()
            counts = torch.histc(flat, bins=bins, min=lo, max=hi)
            width = (hi - lo) / bins
            idx = torch.floor((at - lo) / width).long().clamp(0, bins - 1)
            inside = (at >= lo) & (at <= hi)
            density = torch.where(inside, counts[idx] / (counts.sum() * width), 0).sum()
        out = out + (below + (t - t.detach()) * density) * w.numel()  # value r(t), slope p(t) + p(-t)
    return out / total


@pytest.mark.parametrize("method", ["kde", "histogram"])
def test_layer_bridges_equal_the_per_layer_sum(method):
    g = torch.Generator().manual_seed(0)
    weights = [
        torch.randn(16, 8, 3, 3, generator=g).contiguous(memory_format=torch.channels_last) * 0.1,
        torch.randn(10, 16, generator=g) * 0.3,
        torch.randn(5, generator=g),  # fewer weights than KDE points: all of them are the sample
    ]
    t = torch.tensor([0.05, 0.2, 0.4], requires_grad=True)
    ours = LayerBridges([w.numel() for w in weights], method, generator=torch.Generator().manual_seed(3))(t, weights)
    (grad,) = torch.autograd.grad(ours, t)
    t_ref = t.detach().clone().requires_grad_()
    ref = reference_global_sparsity(t_ref, weights, method, torch.Generator().manual_seed(3))
    (grad_ref,) = torch.autograd.grad(ref, t_ref)
    below = sum(int((w.abs() < ti).sum()) for w, ti in zip(weights, t.tolist()))
    assert ours.item() == pytest.approx(below / sum(w.numel() for w in weights), rel=1e-7)
    assert ours.item() == pytest.approx(ref.item(), abs=1e-7)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-5, atol=1e-7)


def test_histogram_density_bins_like_histc():
    values = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    at = torch.linspace(-3, 3, 41)
    lo, hi = values.min().item(), values.max().item()
    counts = torch.histc(values, bins=50, min=lo, max=hi)
    width = (hi - lo) / 50
    idx = torch.floor((at - lo) / width).long().clamp(0, 49)
    expected = torch.where((at >= lo) & (at <= hi), counts[idx] / (len(values) * width), 0)
    torch.testing.assert_close(histogram_density(values, at, 50), expected)


def test_histogram_of_equal_values_has_no_density():
    assert histogram_density(torch.full((4,), 0.3), torch.tensor([0.3, -0.3])).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("limit", [None, 200])
def test_the_flat_counts_and_samples_are_the_per_layer_ones_bit_for_bit(limit, monkeypatch):
    """The bridge works on all layers' weights as one flat tensor (one kernel each, not one per layer), or on runs
    of layers of at most `limit` weights; its value and gradient are those of counting and sampling layer by layer,
    channels-last weights included."""
    if limit is not None:
        monkeypatch.setattr(bridge, "runs_of", functools.partial(flat_weights.runs_of, limit=limit))
    g = torch.Generator().manual_seed(1)
    weights = [
        torch.randn(16, 8, 3, 3, generator=g).contiguous(memory_format=torch.channels_last) * 0.1,
        torch.randn(32, 16, 1, 1, generator=g) * 0.2,
        torch.randn(10, 16, generator=g) * 0.3,
        torch.randn(5, 7, generator=g).t(),  # a transposed view: its memory order is not its shape's
    ]
    t = torch.tensor([0.05, 0.1, 0.2, 0.4], requires_grad=True)
    bridges = LayerBridges([w.numel() for w in weights], "kde", generator=torch.Generator().manual_seed(3))
    ours = bridges(t, weights)
    (grad,) = torch.autograd.grad(ours, t)

    sample = bridges.tensors(torch.device("cpu"))["sample"]
    points = torch.stack([w[torch.unravel_index(sample[i], w.shape)] for i, w in enumerate(weights)])
    runs = bridges.flat(weights)
    assert len(runs) == (1 if limit is None else 3)  # 1,152 and 512 weights alone, 160 + 35 together
    flat = [layout.flatten([weights[i] for i in layers])[positions] for layers, layout, positions in runs]
    assert torch.equal(torch.cat(flat), points)
    below = torch.stack([(w.abs() < t[i]).sum() for i, w in enumerate(weights)]).sum()
    assert torch.equal(ours.detach(), below.to(t.dtype) / bridges.total)
    valid = bridges.tensors(torch.device("cpu"))["valid"]
    stds = torch.stack([w.std() for w in weights])
    at = torch.stack([t.detach(), -t.detach()], dim=1)
    density = batched_kde_density(points, valid, at, (0.5 * stds).clamp_min(1e-12))
    assert torch.equal(grad, bridges.tensors(torch.device("cpu"))["share"] * density.sum(dim=1))


def test_runs_of_layers_stay_under_the_limit_unless_one_layer_is_larger():
    assert flat_weights.runs_of([5, 5, 5, 20, 1, 1], limit=10) == [range(0, 2), range(2, 3), range(3, 4), range(4, 6)]
    assert flat_weights.runs_of([3, 4], limit=10) == [range(0, 2)] and flat_weights.runs_of([]) == []


def test_flat_runs_stay_under_glibcs_largest_mmap_threshold(monkeypatch):
    """A flat float32 temporary over 32 MB would be mapped afresh, page by page, at every allocation
    (benchmarks/speed/flat_runs.py at 9c9d2d1 measured it); the limit is read when runs are made."""
    assert flat_weights.MAX_FLAT * 4 <= 16 * 2**20
    half = flat_weights.MAX_FLAT // 2
    assert flat_weights.runs_of([half, half, half]) == [range(0, 2), range(2, 3)]
    monkeypatch.setattr(flat_weights, "MAX_FLAT", 4 * half)
    assert flat_weights.runs_of([half, half, half]) == [range(0, 3)]


def test_each_layers_std_from_the_flat_weights_is_its_std():
    """The bridge's bandwidths come from every layer's standard deviation computed on the flat weights at once
    (segment sums), equal to each layer's `Tensor.std` (summed in float64 as a CPU's is), memory orders included."""
    g = torch.Generator().manual_seed(2)
    weights = [
        torch.randn(16, 8, 3, 3, generator=g).contiguous(memory_format=torch.channels_last) * 0.1 + 0.01,
        torch.randn(32, 16, 1, 1, generator=g) * 0.2,
        torch.randn(10, 16, generator=g) * 0.3,
        torch.randn(5, 7, generator=g).t(),
    ]
    layout = flat_weights.FlatLayout(weights)
    assert torch.equal(layout.stds(layout.flatten(weights)), torch.stack([w.std() for w in weights]))
