"""ProbMask's budget projection: s <- clamp(s - v, 0, 1) over every layer's keep-scores, the shift v >= 0 bisected
so that f(v) = sum(clamp(s - v, 0, 1)) is the budget; `project_scores_binned` brackets v from a histogram first."""

from __future__ import annotations

from collections.abc import Callable

import torch

PROJECTION_BISECTIONS = 100  # at most, halvings of v's bracket (float64) in each step's projection
FIXED_POINT_CHECK_EVERY = 8  # halvings between two reads of the bracket (each read waits for the device)
BIN_BITS = 11  # the binned projection's histogram: bins of width 2^-BIN_BITS, exact in float32 (a power of two)
PER_UNIT = 2**BIN_BITS  # bins in a unit of score


def bisect_shift(f: Callable[[torch.Tensor], torch.Tensor], lo: torch.Tensor, hi: torch.Tensor, budget: float):
    """The hi of the bracket (lo, hi], f(lo) > budget >= f(hi), halved on the device until a halving leaves it as
    it was (read every FIXED_POINT_CHECK_EVERY): the hi all PROJECTION_BISECTIONS would give."""
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
    """In place; returns v (0-dim, float64). f is summed layer by layer in float64."""
    budget = kept * sum(s.numel() for s in scores)

    def kept_sum(v: torch.Tensor) -> torch.Tensor:
        return torch.stack([(s.double() - v).clamp_(0, 1).sum() for s in scores]).sum()

    lo = torch.stack([s.min() for s in scores]).min().double() - 1.0
    hi = torch.stack([s.max() for s in scores]).max().double()
    hi = bisect_shift(kept_sum, lo, hi, budget)
    return shift_scores(scores, torch.where(kept_sum(torch.zeros_like(hi)) <= budget, torch.zeros_like(hi), hi))


@torch.no_grad()
def project_scores_binned(scores: list[torch.Tensor], kept: float) -> torch.Tensor:
    """In place; returns v (0-dim, float64), from a histogram bracket and the few scores it leaves unsettled."""
    budget = kept * sum(s.numel() for s in scores)
    f_at_zero = torch.stack([s.clamp(0, 1).sum(dtype=torch.float64) for s in scores]).sum()
    if bool(f_at_zero <= budget):
        return shift_scores(scores, torch.zeros((), dtype=torch.float64, device=scores[0].device))
    counts = bin_counts(scores)
    j_lo, j_hi = bracket_from_histogram(counts, budget)
    if j_hi - j_lo < PER_UNIT:  # hi < lo + 1: every score below lo + 1 or at or above hi
        f = settled_sum(scores, counts, j_lo, j_hi)
        lo, hi = (torch.tensor(j / PER_UNIT, dtype=torch.float64, device=counts.device) for j in (j_lo, j_hi))
        if bool(f(lo) > budget) and bool(f(hi) <= budget):
            return shift_scores(scores, bisect_shift(f, lo, hi, budget))
    # float64 rounding at a bin's edge misled the bracket, or it spans a unit or more: bisect over every score
    return project_scores_bisection(scores, kept)


def bin_counts(scores: list[torch.Tensor]) -> torch.Tensor:
    """Counts of the scores in bins [b w, (b + 1) w), w = 2^-BIN_BITS, at index b + 1 (index 0: at or below -w);
    each score's bin is exact (s * 2^BIN_BITS is exact in float32)."""
    n_bins = int(torch.stack([s.max() for s in scores]).max().mul(PER_UNIT).floor().item()) + 1
    counts = torch.zeros(n_bins + 1, dtype=torch.int64, device=scores[0].device)
    for s in scores:
        index = (s.flatten() * PER_UNIT).clamp_(-1, n_bins).to(torch.int32).add_(1)
        counts += torch.bincount(index, minlength=n_bins + 1)
    return counts


def bracket_from_histogram(counts: torch.Tensor, budget: float) -> tuple[int, int]:
    """(j_lo, j_hi), with f(j_lo w) > budget >= f(j_hi w), from bounds on f(j w) that are exact sums of counts."""
    device = counts.device
    binned = counts[1:].double()
    n_bins = binned.numel()
    bins = torch.arange(n_bins, dtype=torch.float64, device=device)
    pad = torch.zeros(PER_UNIT + 1, dtype=torch.float64, device=device)
    above = torch.cat([binned.flip(0).cumsum(0).flip(0), pad])  # scores in bins >= j
    bin_sum = torch.cat([(binned * bins).flip(0).cumsum(0).flip(0), pad])  # sum of b over bins >= j
    j = torch.arange(n_bins + 1, dtype=torch.float64, device=device)
    ones = above[PER_UNIT : PER_UNIT + n_bins + 1]  # bins >= j + 2^BIN_BITS
    window_count = above[: n_bins + 1] - ones
    window_bins = bin_sum[: n_bins + 1] - bin_sum[PER_UNIT : PER_UNIT + n_bins + 1]
    low = ones + (window_bins - j * window_count) / PER_UNIT  # f(j w) >= low
    high = low + window_count / PER_UNIT  # f(j w) <= high; 0 at j = n_bins
    over = torch.nonzero(low > budget)
    j_lo = int(over.max()) if over.numel() else 0  # else f(0) > budget is all that is known
    return j_lo, int(torch.nonzero(high <= budget).min())


def settled_sum(scores: list[torch.Tensor], counts: torch.Tensor, j_lo: int, j_hi: int):
    """f on [lo, hi] = [j_lo w, j_hi w] as n_one + sum_lin - n_lin * v + the sum over the unsettled scores (those in
    [lo, hi) and [lo + 1, hi + 1), kept in float64) of clamp(a - v, 0, 1); every comparison is exact."""
    lo, hi = j_lo / PER_UNIT, j_hi / PER_UNIT
    binned = counts.double()  # index b + 1: bin b
    n_one = binned[j_hi + PER_UNIT + 1 :].sum()
    n_lin = binned[j_hi + 1 : j_lo + PER_UNIT + 1].sum()
    below_hi, from_lo_plus_one = binned[: j_hi + 1].sum(), binned[j_lo + PER_UNIT + 1 :].sum()
    clamped = torch.stack([s.clamp(hi, lo + 1).sum(dtype=torch.float64) for s in scores]).sum()
    sum_lin = clamped - hi * below_hi - (lo + 1) * from_lo_plus_one
    rest = torch.cat([s[((s >= lo) & (s < hi)) | ((s >= lo + 1) & (s < hi + 1))].double() for s in scores])

    def f(v: torch.Tensor) -> torch.Tensor:
        return n_one + (sum_lin - n_lin * v) + (rest - v).clamp_(0, 1).sum()

    return f


PROJECTIONS = {"binned": project_scores_binned, "bisection": project_scores_bisection}
