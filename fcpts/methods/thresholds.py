"""Learnable per-layer thresholds as weight parametrizations: W -> W * M(|W|, sigmoid(s)), one score s a layer."""

from __future__ import annotations

import math

import torch
from torch import nn

from fcpts.core.flat_weights import FlatLayout, runs_of
from fcpts.core.masks import layer_weight, parametrize_weights, sharing_modules, threshold_mask, weight_parametrizations

MIN_SCORE = -30.0  # sigmoid(-30) ~ 1e-13: "prune nothing" (the released code's floor)


class ThresholdSparsity(nn.Module):
    """Parametrization W -> W * M(|W|, sigmoid(score)): a pruned weight gets no gradient (frozen)."""

    def __init__(self, score: float, threshold_grad: bool):
        super().__init__()
        self.score = nn.Parameter(torch.tensor(float(score)))
        self.threshold_grad = threshold_grad
        self.together: MaskedTogether | None = None  # set while its model's forward masks every layer at once

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        if self.together is not None and (masked := self.together.masked(self)) is not None:
            return masked
        t = torch.sigmoid(self.score)
        return masked_weight(weight, t if self.threshold_grad else t.detach())


def masked_weight(weight: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """W * M(|W|, t), element by element (one layer's weight and threshold, or flat weights and each one's)."""
    return weight * threshold_mask(weight, threshold)


class MaskedTogether:
    """Inside each forward of `model`, every layer's masked weight computed at once on one flat tensor (the same
    values bit for bit, in a few kernels); only where thresholds take no gradient and no weight is shared."""

    def __init__(self, model: nn.Module, layers: dict[str, nn.Module], params: dict[str, ThresholdSparsity]):
        self.layers, self.params = layers, params
        self.index = {id(p): i for i, p in enumerate(params.values())}
        weights = [original_weight(m) for m in layers.values()]
        self.runs = [(run, FlatLayout([weights[i] for i in run])) for run in runs_of([w.numel() for w in weights])]
        self.current: list[torch.Tensor] | None = None
        self.inside = False
        self.hooks = [
            model.register_forward_pre_hook(lambda *_: self._reset(inside=True)),
            model.register_forward_hook(lambda *_: self._reset(inside=False), always_call=True),  # a raise too
        ]
        for p in params.values():
            p.together = self

    @staticmethod
    def applies(layers: dict[str, nn.Module], params: dict[str, ThresholdSparsity]) -> bool:
        return not any(p.threshold_grad for p in params.values()) and not any(
            sharing_modules(layers, name) for name in layers
        )

    def _reset(self, inside: bool) -> None:
        self.inside, self.current = inside, None

    def masked(self, param: ThresholdSparsity) -> torch.Tensor | None:
        """This forward's masked weight of `param`'s layer (None outside a forward)."""
        if not self.inside:
            return None
        if self.current is None:
            self.current = self._all()
        return self.current[self.index[id(param)]]

    def _all(self) -> list[torch.Tensor]:
        modules = list(self.layers.values())
        every = each_threshold([p.score.detach() for p in self.params.values()])
        out = []
        for run, layout in self.runs:
            flat = layout.flatten([original_weight(modules[i]) for i in run])
            t = layout.per_element(every[run.start : run.stop])
            out += layout.views(masked_weight(flat, t))
        return out

    def remove(self) -> None:
        for h in self.hooks:
            h.remove()
        for p in self.params.values():
            p.together = None


def each_threshold(scores: list[torch.Tensor]) -> torch.Tensor:
    """sigmoid of each 0-dim score in one kernel, bit for bit each layer's sigmoid(score): strided, so a
    CPU takes the scalar formula (a contiguous vector's vectorised one can differ in the last bit)."""
    return torch.sigmoid(torch.stack([s.expand(2) for s in scores])[:, 0])


def initial_score(weight: torch.Tensor, rate: float) -> torch.Tensor:
    """The score (a 0-dim float64 tensor on the weight's device) whose threshold, midway between the k-th and
    (k+1)-th smallest |W|, prunes floor(rate * n) weights."""
    mags = weight.detach().abs().flatten().double()
    k = math.floor(rate * mags.numel() + 1e-9)
    if k <= 0:
        return mags.new_tensor(MIN_SCORE)
    lower = torch.kthvalue(mags, k).values
    upper = torch.kthvalue(mags, k + 1).values if k < mags.numel() else lower * 2 + 1e-12
    t = (0.5 * (lower + upper)).clamp(1e-13, 1 - 1e-7)  # the score whose sigmoid is t, inside sigmoid's range
    return (torch.log(t) - torch.log1p(-t)).clamp_min(MIN_SCORE)


def attach(layers: dict[str, nn.Module], rates: dict[str, float], threshold_grad: bool) -> dict[str, ThresholdSparsity]:
    """Parametrize each layer's weight; returns the parametrization of each layer by name."""

    def make(name: str, module: nn.Module) -> ThresholdSparsity:
        weight = layer_weight(module)
        return ThresholdSparsity(float(initial_score(weight, rates[name])), threshold_grad).to(weight.device)

    return parametrize_weights(layers, make)


@torch.no_grad()
def pin_rates(params: dict[str, ThresholdSparsity], layers: dict[str, nn.Module], rates: dict[str, float]) -> None:
    """Re-set each threshold so its layer prunes exactly floor(rate * n) weights (fixed allocation)."""
    for name, p in params.items():
        p.score.copy_(initial_score(original_weight(layers[name]), rates[name]))


def original_weight(module: nn.Module) -> torch.Tensor:
    """The unmasked weight of a parametrized layer."""
    return weight_parametrizations(module).original
