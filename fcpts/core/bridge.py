"""The bridge function r(t) = P(|w| < t) with a density-estimate derivative (paper Eq. 9-11).

Forward returns the exact fraction of a layer's weights below the threshold. Backward returns
dr/dt = p(t) + p(-t), where p is a density estimate of the layer's signed weights:
- "kde" (paper): Gaussian kernel on n sampled weights. The paper's h = 0.5 has no stated unit; we use
  h = bandwidth_scale * std(W) with bandwidth_scale = 0.5 by default, so the estimate is the same for a
  layer whatever its weight scale. For n = 100, Silverman's rule gives 1.06 * n^(-1/5) = 0.42 std, so
  0.5 std is a near-standard, slightly smoother choice.
- "histogram" (released code): a 100-bin histogram density over [min W, max W].
"""

from __future__ import annotations

import math

import torch

_SQRT_2PI = math.sqrt(2.0 * math.pi)


def kde_density(points: torch.Tensor, at: torch.Tensor, bandwidth: torch.Tensor | float) -> torch.Tensor:
    """Gaussian-kernel density estimate of `points`, evaluated at each entry of `at`."""
    z = (at.reshape(-1, 1) - points.reshape(1, -1)) / bandwidth
    return (torch.exp(-0.5 * z * z).mean(dim=1) / (_SQRT_2PI * bandwidth)).reshape(at.shape)


def histogram_density(values: torch.Tensor, at: torch.Tensor, bins: int = 100) -> torch.Tensor:
    """Histogram density of `values` (bins over [min, max]) at each entry of `at`; 0 outside."""
    lo, hi = values.min(), values.max()
    width = (hi - lo) / bins
    if width <= 0:
        return torch.zeros_like(at)
    counts = torch.histc(values.float(), bins=bins, min=lo.item(), max=hi.item())
    density = counts / (counts.sum() * width)
    idx = torch.floor((at - lo) / width).long()
    inside = (at >= lo) & (at <= hi)
    idx = idx.clamp(0, bins - 1)
    return torch.where(inside, density[idx].to(at.dtype), torch.zeros_like(at))


class _Bridge(torch.autograd.Function):
    @staticmethod
    def forward(ctx, threshold, weight, points, bandwidth, method: str, bins: int):
        ctx.save_for_backward(threshold, weight, points, bandwidth)
        ctx.method, ctx.bins = method, bins
        return (weight.abs() < threshold).to(threshold.dtype).mean()

    @staticmethod
    def backward(ctx, grad):
        threshold, weight, points, bandwidth = ctx.saved_tensors
        at = torch.stack([threshold.reshape(()), -threshold.reshape(())])
        if ctx.method == "kde":
            p = kde_density(points, at, bandwidth)
        else:
            p = histogram_density(weight.flatten(), at, ctx.bins)
        return (grad * p.sum()).reshape(threshold.shape), None, None, None, None, None


class Bridge:
    """r(t) for one layer, holding the fixed KDE sample so steps stay deterministic."""

    def __init__(
        self,
        numel: int,
        method: str = "kde",
        points: int = 100,
        bandwidth_scale: float = 0.5,
        bins: int = 100,
        generator: torch.Generator | None = None,
    ):
        if method not in ("kde", "histogram"):
            raise ValueError(f"bridge method must be 'kde' or 'histogram', got {method!r}")
        self.method, self.bins, self.bandwidth_scale = method, bins, bandwidth_scale
        self.sample = None if points >= numel else torch.randperm(numel, generator=generator)[:points]

    def __call__(self, threshold: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        w = weight.detach().flatten()
        pts = w if self.sample is None else w[self.sample.to(w.device)]
        bandwidth = (self.bandwidth_scale * w.std()).clamp_min(1e-12)
        return _Bridge.apply(threshold, w, pts, bandwidth, self.method, self.bins)
