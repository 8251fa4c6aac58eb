"""The bridge function r(t) = P(|w| < t) with a density-estimate derivative (paper Eq. 9-11).

Forward: the exact fraction of a layer's weights below the threshold; backward: dr/dt = p(t) + p(-t), p a density
estimate of the signed weights: "kde" (paper; bandwidth in units of std(W)) or "histogram" (released code).
`LayerBridges` gives the global sparsity of all layers together, nothing read back to the host.
"""

from __future__ import annotations

import math

import torch

from .flat_weights import FlatLayout, runs_of

_SQRT_2PI = math.sqrt(2.0 * math.pi)


def kde_density(points: torch.Tensor, at: torch.Tensor, bandwidth: torch.Tensor | float) -> torch.Tensor:
    """Gaussian-kernel density estimate of `points`, evaluated at each entry of `at`."""
    z = (at.reshape(-1, 1) - points.reshape(1, -1)) / bandwidth
    return (torch.exp(-0.5 * z * z).mean(dim=1) / (_SQRT_2PI * bandwidth)).reshape(at.shape)


def batched_kde_density(
    points: torch.Tensor, valid: torch.Tensor, at: torch.Tensor, bandwidth: torch.Tensor
) -> torch.Tensor:
    """`kde_density` of many layers at once: row l of `points` (L, P), its entries where `valid`, evaluated at
    row l of `at` (L, K) with bandwidth[l]; (L, K)."""
    h = bandwidth[:, None, None]
    z = (at[:, :, None] - points[:, None, :]) / h
    kernel = torch.exp(-0.5 * z * z) * valid[:, None, :]
    count = valid.sum(dim=1, keepdim=True)
    return kernel.sum(dim=2) / count / (_SQRT_2PI * bandwidth[:, None])


def histogram_density(values: torch.Tensor, at: torch.Tensor, bins: int = 100) -> torch.Tensor:
    """Histogram density of `values` (bins over [min, max]) at each entry of `at`; 0 outside. Computed on the
    values' device without reading anything back (equal bins to torch.histc up to rounding at bin edges)."""
    values = values.detach().float().flatten()
    lo, hi = torch.aminmax(values)
    width = (hi - lo) / bins
    safe_width = torch.where(width > 0, width, torch.ones_like(width))
    bin_of = torch.floor((values - lo) / safe_width).long().clamp_(0, bins - 1)
    counts = torch.zeros(bins, dtype=torch.long, device=values.device).scatter_add_(0, bin_of, torch.ones_like(bin_of))
    density = counts.to(values.dtype) / (values.numel() * safe_width)
    idx = torch.floor((at - lo) / safe_width).long().clamp_(0, bins - 1)
    inside = (at >= lo) & (at <= hi) & (width > 0)
    return torch.where(inside, density[idx].to(at.dtype), torch.zeros_like(at))


class _LayerBridges(torch.autograd.Function):
    """Forward: the global fraction of weights below their layer's threshold. Backward: d/dt_l = share_l *
    (p_l(t_l) + p_l(-t_l)), share_l = n_l / N."""

    @staticmethod
    def forward(ctx, thresholds: torch.Tensor, bridges: LayerBridges, *weights: torch.Tensor) -> torch.Tensor:
        below, sampled, stds = [], [], []
        for layers, layout, samples in bridges.flat(list(weights)):
            flat = layout.flatten([weights[i] for i in layers])  # a copy: taken in place below
            if bridges.method == "kde":
                sampled.append(flat[samples])
                stds.append(layout.stds(flat))
            below.append((flat.abs_() < layout.per_element(thresholds[layers.start : layers.stop])).sum())
        ctx.bridges = bridges
        if bridges.method == "kde":
            ctx.save_for_backward(thresholds, torch.cat(sampled), torch.cat(stds))
        else:
            ctx.save_for_backward(thresholds, *weights)
        return torch.stack(below).sum().to(thresholds.dtype) / bridges.total  # counts, summed: exact integers

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        bridges: LayerBridges = ctx.bridges
        thresholds, *saved = ctx.saved_tensors
        at = torch.stack([thresholds, -thresholds], dim=1)  # (L, 2)
        if bridges.method == "kde":
            points, stds = saved
            valid = bridges.tensors(points.device)["valid"]
            bandwidth = (bridges.bandwidth_scale * stds).clamp_min(1e-12)
            density = batched_kde_density(points, valid, at.to(points.dtype), bandwidth)
        else:
            density = torch.stack([histogram_density(w, at[i], bridges.bins) for i, w in enumerate(saved)])
        share = bridges.tensors(thresholds.device)["share"]
        grad_t = grad * share * density.sum(dim=1).to(thresholds.dtype)
        return (grad_t, None, *([None] * bridges.n_layers))


class LayerBridges:
    """The global sparsity sum_l r_l(t_l) n_l / N of several layers, holding each layer's fixed KDE sample so
    steps stay deterministic. Samples are drawn layer by layer from `generator`."""

    def __init__(
        self,
        numels: list[int],
        method: str = "kde",
        points: int = 100,
        bandwidth_scale: float = 0.5,
        bins: int = 100,
        generator: torch.Generator | None = None,
    ):
        self.method, self.bins, self.bandwidth_scale = method, bins, bandwidth_scale
        self.numels, self.total, self.n_layers = list(numels), sum(numels), len(numels)
        samples = [torch.arange(n) if points >= n else torch.randperm(n, generator=generator)[:points] for n in numels]
        width = max((len(s) for s in samples), default=0)
        self._cpu = {
            "sample": torch.stack([torch.cat([s, s.new_zeros(width - len(s))]) for s in samples]),
            "valid": torch.stack([torch.arange(width) < len(s) for s in samples]),
            "share": torch.tensor([n / self.total for n in numels]),
        }
        self._flat: dict[tuple, list[tuple[range, FlatLayout, torch.Tensor]]] = {}
        self._moved: dict[torch.device, dict[str, torch.Tensor]] = {}

    def tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The fixed index tensors on `device`, copied there once."""
        if device not in self._moved:
            self._moved[device] = {k: v.to(device) for k, v in self._cpu.items()}
        return self._moved[device]

    def flat(self, weights: list[torch.Tensor]) -> list[tuple[range, FlatLayout, torch.Tensor]]:
        """Runs of layers, each with its flat layout and its layers' sample positions in it, made once per layout."""
        key = (weights[0].device, *((tuple(w.shape), w.stride()) for w in weights))
        if key not in self._flat:
            sample = self.tensors(weights[0].device)["sample"]
            self._flat[key] = []
            for layers in runs_of(self.numels):
                layout = FlatLayout([weights[i] for i in layers])
                positions = torch.stack([layout.positions(j, sample[i]) for j, i in enumerate(layers)])
                self._flat[key].append((layers, layout, positions))
        return self._flat[key]

    def __call__(self, thresholds: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
        """The global fraction of weights below their layer's threshold; differentiable in `thresholds` (L,)."""
        return _LayerBridges.apply(thresholds, self, *(w.detach() for w in weights))
