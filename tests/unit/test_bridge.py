"""The bridge function r(t) and its density-based derivative."""

import math

import pytest
import torch

from fcpts.core.bridge import Bridge, histogram_density, kde_density


def normal_pdf(x, sigma):
    return math.exp(-0.5 * (x / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))


@pytest.fixture
def gaussian_weights():
    g = torch.Generator().manual_seed(0)
    return torch.randn(200_000, generator=g) * 0.05  # sigma = 0.05, a typical conv weight scale


def test_forward_is_exact_fraction_below_threshold(gaussian_weights):
    w = gaussian_weights
    t = torch.tensor(0.03)
    r = Bridge(w.numel())(t, w)
    assert r.item() == pytest.approx((w.abs() < 0.03).float().mean().item(), abs=0)


@pytest.mark.parametrize("t", [0.01, 0.05, 0.1])
def test_kde_derivative_matches_analytic_density(gaussian_weights, t):
    """With many points and a narrow kernel, dr/dt -> p(t) + p(-t) = 2 * N(t; 0, sigma^2)."""
    w, sigma = gaussian_weights, 0.05
    thr = torch.tensor(t, requires_grad=True)
    Bridge(w.numel(), points=20_000, bandwidth_scale=0.1, generator=torch.Generator().manual_seed(1))(thr, w).backward()
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
        Bridge(w.numel(), generator=torch.Generator().manual_seed(seed))(thr, w).backward()
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
    Bridge(w.numel(), method="histogram")(thr, w).backward()
    assert thr.grad.item() == pytest.approx(2 * normal_pdf(0.05, sigma), rel=0.05)


def test_histogram_density_is_zero_outside_range():
    vals = torch.tensor([0.0, 1.0, 2.0])
    assert histogram_density(vals, torch.tensor([5.0, -1.0])).tolist() == [0.0, 0.0]


def test_bridge_rejects_unknown_method():
    with pytest.raises(ValueError, match="kde"):
        Bridge(10, method="spline")
