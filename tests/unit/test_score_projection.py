"""ProbMask's budget projection: both ways land on the budget, and the binned one on the bisection's v."""

import pytest
import torch

import baselines.score_projection as projection
from baselines.probmask import ProbMaskOptions
from baselines.score_projection import (
    BIN_BITS,
    PROJECTIONS,
    bin_counts,
    bracket_from_histogram,
    project_scores_binned,
    project_scores_bisection,
    settled_sum,
)
from tests.conftest import DEVICES
from tests.unit.tiny import grid_run, tiny_images, tiny_net

SHAPES = [(16, 3, 3, 3), (64, 16, 3, 3), (10, 64), (1000,)]


def mid_run_scores(seed: int) -> list[torch.Tensor]:
    """Scores as Adam leaves them between projections: a few below 0 and above 1, many exactly 0 or 1, blocks
    of equal scores, or all 1 (the first step)."""
    g = torch.Generator().manual_seed(seed)
    scores = [torch.rand(shape, generator=g) * 1.4 - 0.2 for shape in SHAPES]
    if seed % 3 == 0:
        scores = [s.clamp(0, 1) for s in scores]
    if seed % 3 == 1:
        scores[3][:600] = 0.5
    if seed % 4 == 3:
        scores = [torch.ones(shape) for shape in SHAPES]
    return scores


def full_sum(scores, v) -> float:
    return sum((s.double() - v).clamp(0, 1).sum().item() for s in scores)


@pytest.mark.parametrize("name", list(PROJECTIONS))
def test_a_projection_hits_the_kept_count(name):
    g = torch.Generator().manual_seed(0)
    scores = [torch.rand(50, generator=g) * 1.5, torch.rand(3, 7, generator=g)]
    n = sum(s.numel() for s in scores)
    PROJECTIONS[name](scores, 0.3)
    total = sum(s.sum().item() for s in scores)
    assert total == pytest.approx(0.3 * n, abs=1e-6 * n)
    assert all(((s >= 0) & (s <= 1)).all() for s in scores)


@pytest.mark.parametrize("name", list(PROJECTIONS))
def test_a_projection_decides_on_the_device(name):
    scores = [torch.full((10,), 0.4)]
    assert PROJECTIONS[name](scores, 0.5).item() == 0.0  # within budget already: nothing moves
    assert torch.equal(scores[0], torch.full((10,), 0.4))
    v = PROJECTIONS[name]([torch.ones(10)], 0.3)
    assert isinstance(v, torch.Tensor) and v.dtype == torch.float64 and v.item() == pytest.approx(0.7)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(12))
def test_the_binned_projection_finds_the_bisections_shift(seed, device):
    """The same v up to the rounding of float64 sums (here to the last bit or two), so the same scores within
    one float32 rounding of each other; on a GPU too (its histogram counted by bincount)."""
    scores = [s.to(device) for s in mid_run_scores(seed)]
    for kept in (0.99, 0.9, 0.5, 0.1, 0.002):
        binned, bisected = [s.clone() for s in scores], [s.clone() for s in scores]
        v_binned, v_bisected = project_scores_binned(binned, kept), project_scores_bisection(bisected, kept)
        assert v_binned.item() == pytest.approx(v_bisected.item(), abs=1e-12)
        for a, b in zip(binned, bisected):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_the_histogram_brackets_the_shift_within_a_few_bins(seed):
    """f(lo) > budget >= f(hi) by full float64 sums, both ends multiples of 2^-BIN_BITS, a few bins apart, so
    the bisection after it runs over a few bins' worth of scores; the counts are each score's bin, exactly."""
    scores = mid_run_scores(seed)
    n = sum(s.numel() for s in scores)
    counts = bin_counts(scores)
    flat = torch.cat([s.flatten() for s in scores]).double()
    assert counts.sum().item() == n and counts[0].item() == int((flat <= -(2.0**-BIN_BITS)).sum())
    for b in (0, 1, 700, 2047, 2048):
        in_bin = (flat >= b * 2.0**-BIN_BITS) & (flat < (b + 1) * 2.0**-BIN_BITS)
        if b == 0:
            in_bin |= (flat < 0) & (flat > -(2.0**-BIN_BITS))
        assert counts[b + 1].item() == int(in_bin.sum()) if b + 1 < counts.numel() else not in_bin.any()
    for kept in (0.9, 0.5, 0.1):
        budget = kept * n
        if full_sum(scores, 0.0) <= budget:
            continue
        j_lo, j_hi = bracket_from_histogram(counts, budget)
        lo, hi = j_lo * 2.0**-BIN_BITS, j_hi * 2.0**-BIN_BITS
        assert full_sum(scores, lo) > budget >= full_sum(scores, hi)
        assert 0 < j_hi - j_lo <= 3


@pytest.mark.parametrize("seed", range(6))
def test_settled_sums_equal_the_full_sum_across_the_bracket(seed):
    scores = mid_run_scores(seed)
    n = sum(s.numel() for s in scores)
    counts = bin_counts(scores)
    for j_lo, j_hi in (bracket_from_histogram(counts, 0.4 * n), (0, 1500), (200, 2048)):
        f = settled_sum(scores, counts, j_lo, j_hi)
        for t in torch.linspace(0, 1, 9, dtype=torch.float64):
            v = (j_lo + t * (j_hi - j_lo)) * 2.0**-BIN_BITS
            assert f(v).item() == pytest.approx(full_sum(scores, v.item()), abs=1e-9 * n)


@pytest.mark.parametrize("wrong", ["low end too high", "a unit wide"])
def test_a_bracket_missed_by_rounding_falls_back_to_the_bisection_over_every_score(wrong, monkeypatch):
    """The bracket's ends are checked with the settled sums, and its width against a unit (beyond it a score's
    term could be unsettled twice); a wrong one (here forced) leaves the step to the bisection: its v, bit for bit."""
    scores = mid_run_scores(0)
    reference = [s.clone() for s in scores]
    right, settled = projection.bracket_from_histogram, projection.settled_sum
    calls = []

    def forced(counts, budget):
        j_lo, j_hi = right(counts, budget)
        return (j_hi, j_hi + 1) if wrong == "low end too high" else (0, 2**BIN_BITS)

    def recorded(scores, counts, j_lo, j_hi):
        calls.append((j_lo, j_hi))
        return settled(scores, counts, j_lo, j_hi)

    monkeypatch.setattr(projection, "bracket_from_histogram", forced)
    monkeypatch.setattr(projection, "settled_sum", recorded)
    v = project_scores_binned(scores, 0.5)
    assert len(calls) == (1 if wrong == "low end too high" else 0)
    assert v.item() == project_scores_bisection(reference, 0.5).item()
    assert all(torch.equal(a, b) for a, b in zip(scores, reference))


def test_probmask_projects_with_the_binned_way_and_records_before_it_ran_with_the_bisection():
    assert ProbMaskOptions().projection == "binned"
    assert ProbMaskOptions.DEFAULTS_BEFORE == {"projection": "bisection"}
    with pytest.raises(ValueError, match="projection"):
        ProbMaskOptions(projection="exact").validate()


def test_probmask_runs_with_either_projection_agree():
    """Whole runs: the same losses within float rounding and the same exported masks."""
    budget = dict(iterations=6, batch_size=8)
    binned_model, binned = grid_run("probmask", tiny_net(), tiny_images(), 0.7, **budget)
    bisected_model, bisected = grid_run(
        "probmask", tiny_net(), tiny_images(), 0.7, options={"projection": "bisection"}, **budget
    )
    for a, b in zip(binned.history, bisected.history):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    for a, b in zip(binned_model.modules(), bisected_model.modules()):
        if isinstance(a, (torch.nn.Conv2d, torch.nn.Linear)):
            assert torch.equal(a.weight != 0, b.weight != 0)


@torch.no_grad()
def _projection_over_one_flat_copy(scores: list[torch.Tensor], kept: float) -> torch.Tensor:
    """The projection as first written: every score in one float64 tensor (the reference for the layer-wise one)."""
    flat = torch.cat([s.flatten() for s in scores]).double()
    budget = kept * flat.numel()
    lo, hi = flat.min() - 1.0, flat.max()
    for _ in range(100):
        v = 0.5 * (lo + hi)
        over = (flat - v).clamp(0, 1).sum() > budget
        lo, hi = torch.where(over, v, lo), torch.where(over, hi, v)
    v = torch.where(flat.clamp(0, 1).sum() <= budget, torch.zeros_like(hi), hi)
    for s in scores:
        s.sub_(v.to(s.dtype)).clamp_(0, 1)
    return v


@pytest.mark.parametrize("seed", range(6))
def test_the_layerwise_bisection_moves_scores_exactly_as_the_flat_one(seed):
    """Summing layer by layer (bounded memory) changes only the float64 summation order: the float32 shift the
    scores take, and so every score, stay bit-identical (mid-run scores: many exactly 0 or 1, the rest spread)."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(16, 3, 3, 3), (64, 16, 3, 3), (10, 64), (1000,)]
    scores = [torch.rand(shape, generator=g) * 1.4 - 0.2 for shape in shapes]
    scores = [s.clamp(0, 1) for s in scores]
    for kept in (0.9, 0.5, 0.1):
        ours, reference = [s.clone() for s in scores], [s.clone() for s in scores]
        v = project_scores_bisection(ours, kept)
        v_ref = _projection_over_one_flat_copy(reference, kept)
        assert v.to(torch.float32) == v_ref.to(torch.float32)
        assert all(torch.equal(a, b) for a, b in zip(ours, reference))


@pytest.mark.parametrize("seed", range(4))
def test_the_bisection_stopping_at_its_fixed_point_gives_what_every_halving_would(seed, monkeypatch):
    """The bisection stops once a halving leaves the bracket as it was; the v and scores are bit for bit those of
    all PROJECTION_BISECTIONS halvings (a check interval beyond them never stops early), scores spread or tied."""
    g = torch.Generator().manual_seed(seed)
    scores = [torch.rand(shape, generator=g).clamp(0.1, 0.9) for shape in ((64, 16, 3, 3), (10, 64), (999,))]
    if seed % 2:
        scores[2][:500] = 0.5  # a block of equal scores
    for kept in (0.9, 0.5, 0.1, 0.002):
        early, every = [s.clone() for s in scores], [s.clone() for s in scores]
        v_early = project_scores_bisection(early, kept)
        with monkeypatch.context() as m:
            m.setattr(projection, "FIXED_POINT_CHECK_EVERY", projection.PROJECTION_BISECTIONS + 1)
            v_every = project_scores_bisection(every, kept)
        assert v_early.item() == v_every.item() and v_early.dtype == torch.float64
        assert all(torch.equal(a, b) for a, b in zip(early, every))
