"""ProbMask's budget projection: s <- clamp(s - v, 0, 1) over every layer's keep-scores, with the shift v >= 0
chosen so that sum(clamp(s - v, 0, 1)) is the budget (v = 0 when the scores are within it already).

f(v) = sum(clamp(s - v, 0, 1)) falls as v grows, so v is found by bisection; both projections keep the bracket
(lo, hi] with f(lo) > budget >= f(hi), halve it until a halving no longer moves it in float64, and take v = hi.
`project_scores_bisection` evaluates f over every score at each of its ~60 halvings: on a CPU that is nearly all of
a ProbMask step (ResNet-18: about 4 of 5 s at batch 1). `project_scores_binned` first brackets v between two
multiples of 2^-11 from one histogram of the scores, then bisects over the few scores whose term in f is not
already settled on that bracket (0, 1 or s - v); the same v up to the rounding of float64 sums.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

PROJECTION_BISECTIONS = 100  # at most, halvings of v's bracket (float64) in each step's projection
FIXED_POINT_CHECK_EVERY = 8  # halvings between two reads of the bracket (each read waits for the device)
BIN_BITS = 11  # the binned projection's histogram: bins of width 2^-BIN_BITS, exact in float32 (a power of two)


def bisect_shift(f: Callable[[torch.Tensor], torch.Tensor], lo: torch.Tensor, hi: torch.Tensor, budget: float):
    """The hi of the bracket (lo, hi], f(lo) > budget >= f(hi), halved until it stops moving. Every decision is a
    torch.where on the device; the bracket is read back every FIXED_POINT_CHECK_EVERY halvings, and the halving
    stops once one left it as it was: from then on every halving repeats that one (the midpoint is an end of the
    bracket in float64), so stopping gives the hi that all PROJECTION_BISECTIONS would, in about 60 passes."""
    for halving in range(1, PROJECTION_BISECTIONS + 1):
        v = 0.5 * (lo + hi)
        over = f(v) > budget
        new_lo, new_hi = torch.where(over, v, lo), torch.where(over, hi, v)
        if halving % FIXED_POINT_CHECK_EVERY == 0 and bool((new_lo == lo) & (new_hi == hi)):
            break
        lo, hi = new_lo, new_hi
    return hi


def shift_scores(scores: list[torch.Tensor], v: torch.Tensor) -> torch.Tensor:
    for s in scores:
        s.sub_(v.to(s.dtype)).clamp_(0, 1)
    return v


@torch.no_grad()
def project_scores_bisection(scores: list[torch.Tensor], kept: float) -> torch.Tensor:
    """In place; returns v (0-dim, float64). f is summed layer by layer in float64, so the extra memory is one
    layer's scores in float64, never all of them (on ViT-L a flat float64 copy and its two temporaries were 7 GB)."""
    budget = kept * sum(s.numel() for s in scores)

    def kept_sum(v: torch.Tensor) -> torch.Tensor:
        return torch.stack([(s.double() - v).clamp_(0, 1).sum() for s in scores]).sum()

    lo = torch.stack([s.min() for s in scores]).min().double() - 1.0
    hi = torch.stack([s.max() for s in scores]).max().double()
    hi = bisect_shift(kept_sum, lo, hi, budget)
    return shift_scores(scores, torch.where(kept_sum(torch.zeros_like(hi)) <= budget, torch.zeros_like(hi), hi))


@torch.no_grad()
def project_scores_binned(scores: list[torch.Tensor], kept: float) -> torch.Tensor:
    """In place; returns v (0-dim, float64). About six passes over the scores instead of ~60 (`score_projection`'s
    docstring). Extra memory: one layer's bin indices (int64) and the unsettled scores, a few bins' worth."""
    budget = kept * sum(s.numel() for s in scores)
    f_at_zero = torch.stack([s.clamp(0, 1).sum(dtype=torch.float64) for s in scores]).sum()
    if bool(f_at_zero <= budget):
        return shift_scores(scores, torch.zeros((), dtype=torch.float64, device=scores[0].device))
    lo, hi = bracket_from_histogram(scores, budget)
    f = settled_sum(scores, lo, hi)
    if not (bool(f(lo) > budget) and bool(f(hi) <= budget)):  # only by float64 rounding at a bin's edge
        f, lo = settled_sum(scores, 0.0, float(hi)), torch.zeros((), dtype=torch.float64, device=hi.device)
    return shift_scores(scores, bisect_shift(f, lo, hi, budget))


def bracket_from_histogram(scores: list[torch.Tensor], budget: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi], both multiples of w = 2^-BIN_BITS, with f(lo) > budget >= f(hi), from the scores' counts in bins
    [b w, (b + 1) w) (s * 2^BIN_BITS is exact in float32, so each score's bin is too). At v = j w a score in bin b
    adds 0 to f when b < j, 1 when b >= j + 2^BIN_BITS, and between (b - j) w and (b + 1 - j) w otherwise: f(j w)
    lies between two sums of counts, exact in float64. Scores below 0 add 0 at every v >= 0."""
    per_unit = 2**BIN_BITS
    top = torch.stack([s.max() for s in scores]).max()
    n_bins = int(torch.floor(top * per_unit).item()) + 1  # bins 0 .. n_bins - 1 hold every score >= 0
    counts = torch.zeros(n_bins + 1, dtype=torch.int64, device=top.device)  # index 0: the scores below 0
    for s in scores:
        index = (s.flatten() * per_unit).floor_().clamp_(min=-1).add_(1).long()
        counts += torch.bincount(index, minlength=n_bins + 1)
    counts = counts[1:].double()  # every count and sum below is an integer under 2^53: exact
    bins = torch.arange(n_bins, dtype=torch.float64, device=top.device)
    above = counts.flip(0).cumsum(0).flip(0)  # scores in bins >= j
    bin_sum = (counts * bins).flip(0).cumsum(0).flip(0)  # sum of b over bins >= j
    j = torch.arange(n_bins + 1, dtype=torch.float64, device=top.device)
    pad = torch.zeros(per_unit + 1, dtype=torch.float64, device=top.device)
    above, bin_sum = torch.cat([above, pad]), torch.cat([bin_sum, pad])
    ones = above[per_unit : per_unit + n_bins + 1]  # bins >= j + 2^BIN_BITS
    window_count = above[: n_bins + 1] - ones
    window_bins = bin_sum[: n_bins + 1] - bin_sum[per_unit : per_unit + n_bins + 1]
    low = ones + (window_bins - j * window_count) / per_unit  # f(j w) >= low
    high = low + window_count / per_unit  # f(j w) <= high; 0 at j = n_bins
    over = torch.nonzero(low > budget)
    lo = over.max() if over.numel() else torch.zeros((), dtype=torch.int64, device=top.device)  # f(0) > budget
    hi = torch.nonzero(high <= budget).min()
    return lo.double() / per_unit, hi.double() / per_unit


def settled_sum(scores: list[torch.Tensor], lo, hi) -> Callable[[torch.Tensor], torch.Tensor]:
    """f on [lo, hi] as n_one + sum_lin - n_lin * v + sum over the unsettled scores of clamp(a - v, 0, 1): a score
    <= lo adds 0 there, one >= hi + 1 adds 1, one in [hi, lo + 1] adds s - v; only the others are kept (float64).
    lo and hi are multiples of 2^-BIN_BITS, so every comparison with a float32 score is exact."""
    lo32, hi32 = float(lo), float(hi)
    n_one, n_lin, sum_lin = (torch.zeros((), dtype=torch.float64, device=scores[0].device) for _ in range(3))
    unsettled = []
    for s in scores:  # no read-back in the loop: the counts stay on the device
        one = s >= hi32 + 1
        lin = (s >= hi32) & (s <= lo32 + 1)
        n_one += one.sum()
        n_lin += lin.sum()
        sum_lin += torch.where(lin, s, 0).sum(dtype=torch.float64)
        unsettled.append(s[~(one | lin | (s <= lo32))].double())
    rest = torch.cat(unsettled)

    def f(v: torch.Tensor) -> torch.Tensor:
        return n_one + (sum_lin - n_lin * v) + (rest - v).clamp_(0, 1).sum()

    return f


PROJECTIONS = {"binned": project_scores_binned, "bisection": project_scores_bisection}
