"""Per-layer sparsity allocations (rates {name: fraction of zeros}) and exact masks: `keep_masks_for_rates` per layer,
`global_keep_masks` for a score ranked over all layers; both prune exactly round(target * N) weights."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from .masks import check_target, layer_weight


def erk_rates(layers: dict[str, nn.Module], target: float, power: float = 1.0) -> dict[str, float]:
    """Erdos-Renyi-Kernel allocation (RigL): density_l proportional to (sum(shape) / prod(shape))^power, kernel dims
    included; a layer whose density would exceed 1 is made dense and the others carry its zeros (released code)."""
    target = check_target(target)
    if target == 0:
        return {name: 0.0 for name in layers}
    shapes = {name: list(layer_weight(m).shape) for name, m in layers.items()}
    numel = {name: math.prod(s) for name, s in shapes.items()}
    raw = {name: (sum(s) / math.prod(s)) ** power for name, s in shapes.items()}
    dense: set[str] = set()
    while True:
        # Zeros must total target * N; dense layers hold none, so the rest hold all of them.
        kept_budget = sum(numel[n] * (1 - target) for n in numel if n not in dense)
        kept_budget -= sum(numel[n] * target for n in dense)
        divisor = sum(raw[n] * numel[n] for n in numel if n not in dense)
        if divisor == 0:
            raise ValueError(f"ERK cannot reach sparsity {target}: every layer had to be made dense")
        eps = kept_budget / divisor
        over = [n for n in numel if n not in dense and eps * raw[n] > 1]
        if not over:
            break
        top = max(raw[n] for n in over)
        dense.update(n for n in over if raw[n] == top)
    return {n: 0.0 if n in dense else 1.0 - eps * raw[n] for n in numel}


def rates_to_counts(
    rates: dict[str, float], numels: dict[str, int], target: float, zeros: dict[str, int] | None = None
) -> dict[str, int]:
    """Per-layer prune counts from rates (floor, then the remainder by largest fractional part) that end with exactly
    round(target * N) zeros, a layer ending with max(count, `zeros` already there); rate 0 is never touched."""
    zeros = zeros or {}
    # a target below the zeros already there (target 0 on a model with some) prunes nothing more
    total_zeros = max(round(target * sum(numels.values())), sum(zeros.get(n, 0) for n in rates))
    exact = {n: rates[n] * numels[n] for n in rates}
    counts = {n: min(numels[n], max(0, math.floor(exact[n] + 1e-9))) for n in rates}

    def ending_zeros(n: str, count: int) -> int:
        return max(count, zeros.get(n, 0))

    remainder = total_zeros - sum(ending_zeros(n, c) for n, c in counts.items())
    step = 1 if remainder > 0 else -1
    order = sorted(
        (n for n in rates if rates[n] > 0),
        key=lambda n: (exact[n] - math.floor(exact[n])) * step,
        reverse=True,
    )
    while remainder != 0:
        moved = False
        for n in order:
            if remainder == 0:
                break
            if 0 <= counts[n] + step <= numels[n]:
                remainder -= ending_zeros(n, counts[n] + step) - ending_zeros(n, counts[n])
                counts[n] += step
                moved = True
        if not moved:
            raise ValueError("cannot distribute the remaining zeros: target unreachable with these rates")
    return counts


def _order_keys(x: torch.Tensor) -> torch.Tensor:
    """int64 keys in the order of x's float32 values, as a sort orders them: -0.0 equal to 0.0, NaN last."""
    bits = x.detach().float().contiguous().view(torch.int32).long()
    keys = torch.where(bits >= 0, bits, -(bits & 0x7FFFFFFF))
    return keys.masked_fill_(x.detach().float().isnan(), 1 << 31)  # above +inf's key (0x7F800000)


_KEY_RANGE = (-(1 << 31), 1 << 33)  # (lowest, width): every key of _order_keys and the tie keys (at most 1 << 32)
_RADIX_BITS = 17  # bins of one counting pass: 131,072 counters, so two passes cover the range


def _smallest_key_covering(keys_of: Callable[[int], torch.Tensor], n_parts: int, k: int) -> int:
    """The smallest key K with at least k keys <= K over all parts (1 <= k <= their count), by radix selection over
    one part's keys at a time."""
    lo, width = _KEY_RANGE
    below = 0  # keys < lo
    while width > 1:
        shift = max(0, (width - 1).bit_length() - _RADIX_BITS)
        bins = ((width - 1) >> shift) + 1
        counts: torch.Tensor | None = None  # on the parts' device: one read back a pass
        for i in range(n_parts):
            keys = keys_of(i).flatten()
            if (lo, width) != _KEY_RANGE:
                keys = keys[(keys >= lo) & (keys < lo + width)]
            part = torch.bincount((keys - lo) >> shift, minlength=bins)
            counts = part if counts is None else counts + part.to(counts.device)
        assert counts is not None
        cumulative = counts.cumsum(0)
        b = int(torch.searchsorted(cumulative, k - below))  # the first bin where the count reaches k
        below += int(cumulative[b] - counts[b])
        lo, width = lo + (b << shift), min(1 << shift, width - (b << shift))
    return lo


def lowest_k_keep(scores: list[torch.Tensor], k: int, tiebreak: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Keep-masks (one per tensor) that prune exactly the k lowest scores of all tensors together, in the order of
    (score, `tiebreak`, position), compared as float32: a stable sort's masks without concatenating the scores."""
    keep = [torch.ones(s.shape, dtype=torch.bool, device=s.device) for s in scores]
    total = sum(s.numel() for s in scores)
    if not 0 <= k <= total:
        raise ValueError(f"cannot prune {k} of {total} weights")
    if k == 0:
        return keep
    n = len(scores)
    cut = _smallest_key_covering(lambda i: _order_keys(scores[i]), n, k)
    tied = []
    for i in range(n):
        keys = _order_keys(scores[i])
        keep[i] &= keys >= cut
        tied.append(keys == cut)
    left = k - sum(int((~m).sum()) for m in keep)  # to prune among the scores equal to the cut
    if tiebreak is not None:
        outside = 1 << 32  # above every key: a weight not tied at the cut never counts

        def tie_keys(i: int) -> torch.Tensor:
            return torch.where(tied[i], _order_keys(tiebreak[i]), outside)

        second = _smallest_key_covering(tie_keys, n, left)
        for i in range(n):
            keys = tie_keys(i)
            keep[i] &= keys >= second
            left -= int((keys < second).sum())
            tied[i] = keys == second
    for i in range(n):  # the rest of the ties by position
        chosen = tied[i].flatten().nonzero().squeeze(1)[:left]
        keep[i].view(-1)[chosen] = False
        left -= len(chosen)
    return keep


@torch.no_grad()
def keep_masks_for_rates(
    layers: dict[str, nn.Module], rates: dict[str, float], target: float
) -> dict[str, torch.Tensor]:
    """Magnitude masks with the given per-layer rates, totalling `target` exactly; weights already zero are always
    pruned, so a method that rewrites kept weights cannot revive them."""
    numels = {n: layer_weight(m).numel() for n, m in layers.items()}
    zeros = {n: int((layer_weight(m) == 0).sum()) for n, m in layers.items()}
    counts = rates_to_counts(rates, numels, target, zeros)
    return {n: lowest_k_keep([layer_weight(m).abs()], max(counts[n], zeros[n]))[0] for n, m in layers.items()}


@torch.no_grad()
def global_keep_masks(
    scores: dict[str, torch.Tensor], target: float, tiebreak: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """Prune exactly round(target * N) weights with the lowest scores across all layers
    (equal scores: the lower `tiebreak`, e.g. |W|, goes first)."""
    target = check_target(target)
    names = list(scores)
    k = round(target * sum(scores[n].numel() for n in names))
    keep = lowest_k_keep([scores[n] for n in names], k, None if tiebreak is None else [tiebreak[n] for n in names])
    return dict(zip(names, keep))


@torch.no_grad()
def lamp_scores(weight: torch.Tensor) -> torch.Tensor:
    """LAMP (Lee et al. 2021): w_u^2 / sum_{v >= u} w_v^2 over the layer's weights sorted ascending."""
    sq = weight.detach().flatten().double() ** 2
    order = torch.sort(sq, stable=True).indices
    sorted_sq = sq[order]
    tail = torch.flip(torch.cumsum(torch.flip(sorted_sq, [0]), 0), [0])
    scores = torch.empty_like(sq)
    scores[order] = sorted_sq / tail.clamp_min(torch.finfo(torch.float64).tiny)
    return scores.view_as(weight)


def l2norm_scores(layers: dict[str, nn.Module]) -> dict[str, torch.Tensor]:
    """POT's "L2Norm" ranking: |W| over the layer's Frobenius norm; 0 for a layer of zeros (not 0/0)."""
    scores = {}
    for n, m in layers.items():
        weight = layer_weight(m).detach()
        norm = weight.norm()
        scores[n] = torch.where(norm > 0, weight.abs() / norm, torch.zeros_like(weight))
    return scores


def allocation_keep_masks(layers: dict[str, nn.Module], target: float, how: str) -> dict[str, torch.Tensor]:
    """Magnitude keep-masks pruning exactly round(target * N) weights under the allocation `how`: per-layer rates
    ("uniform", "erk") or one global cut of "lamp", "l2norm" or "global-magnitude" scores."""
    if how in ("uniform", "erk"):
        rates = erk_rates(layers, target) if how == "erk" else dict.fromkeys(layers, float(check_target(target)))
        return keep_masks_for_rates(layers, rates, target)
    if how == "l2norm":
        return global_keep_masks(l2norm_scores(layers), target)
    score = lamp_scores if how == "lamp" else torch.abs  # "global-magnitude": |W|
    return global_keep_masks({n: score(layer_weight(m).detach()) for n, m in layers.items()}, target)
