"""The registry and the defining behaviour of STR and ProbMask."""

import pytest
import torch
from torch import nn

from baselines.probmask import export_masks, kept_fraction, project_scores
from baselines.soft_threshold import SoftThreshold
from fcpts.core.masks import sparsity_summary
from fcpts.methods import METHODS, get_method
from tests.unit.tiny import FailingAt, tiny_net

ALL = ["fcpts", "fcpts-fixed", "pot-l2norm", "pot-erk", "str", "probmask", "uniform", "erk", "global-magnitude", "lamp"]


net = tiny_net


def images():
    return torch.randn(32, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def run(name, model, x, target, options=None, **budget):
    """A method run the way the grid runs it: a budget it takes what it needs from, plus overrides."""
    method = get_method(name)
    return method(model, x, target, method.make_options({"progress": False, **budget}, options))


def test_registry_has_every_method():
    assert set(ALL) <= set(METHODS)
    with pytest.raises(ValueError, match="available"):
        get_method("obc")


@pytest.mark.parametrize("name", [m for m in ALL if m != "str"])
def test_every_method_but_str_lands_exactly_on_target(name):
    options = {"iterations": 5} if name.startswith("pot") else None
    model, report = run(name, net(), images(), 0.75, iterations=4, batch_size=8, options=options)
    achieved, per_layer = sparsity_summary(model)
    n = sum(r["numel"] for r in per_layer)
    assert round(achieved * n) == round(0.75 * n)
    assert report.achieved_sparsity == achieved and report.target_sparsity == 0.75


def test_str_shrinks_kept_weights_and_reports_what_it_reached(caplog):
    p = SoftThreshold(s_init=0.0)  # threshold sigmoid(0) = 0.5
    assert p(torch.tensor([-2.0, 0.3, 0.75])).tolist() == [-1.5, 0.0, 0.25]
    with caplog.at_level("WARNING", logger="fcpts"):
        model, report = run("str", net(), images(), 0.6, iterations=3, batch_size=8, options={"search_runs": 2})
    assert len(report.extra["trials"]) == 2
    assert report.achieved_sparsity == pytest.approx(sparsity_summary(model)[0])
    assert not report.extra["converged_to_target"]  # 3 steps a trial: far from 0.6
    assert f"STR reached sparsity {report.achieved_sparsity:.4f}, not the target 0.6000" in caplog.text


def test_probmask_projection_hits_the_kept_count():
    g = torch.Generator().manual_seed(0)
    scores = [torch.rand(50, generator=g) * 1.5, torch.rand(3, 7, generator=g)]
    n = sum(s.numel() for s in scores)
    project_scores(scores, 0.3)
    total = sum(s.sum().item() for s in scores)
    assert total == pytest.approx(0.3 * n, abs=1e-6 * n)
    assert all(((s >= 0) & (s <= 1)).all() for s in scores)


def test_probmask_export_prunes_weights_that_are_already_zero_first():
    """A zero weight keeps its score (its score gets no gradient), so it can rank high; kept, it would spend
    budget on nothing and leave the model sparser than the target (Lite0 at 50%: 50.13%)."""
    scores = {"a": torch.tensor([0.9, 0.8, 0.2, 0.1])}
    weights = {"a": torch.tensor([0.0, 1.0, 2.0, 3.0])}
    assert export_masks(scores, weights, 0.5)["a"].tolist() == [False, True, True, False]
    assert export_masks(scores, {"a": weights["a"] + 1}, 0.5)["a"].tolist() == [True, True, False, False]


def test_probmask_cubic_schedule():
    ks = [kept_fraction(t, 100, 0.9, 0.75) for t in range(100)]
    assert ks[0] > 0.95 and ks[-1] == pytest.approx(0.1) and ks[80] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(ks, ks[1:]))


@pytest.mark.parametrize("name", ["probmask", "str"])
def test_checkpoint_of_another_run_is_refused(name, tmp_path):
    """A checkpoint is identified by target, options and calibration, not only by method and seed."""
    ckpt = str(tmp_path / "run.pt")
    options = {"search_runs": 1} if name == "str" else None
    run(name, net(), images(), 0.7, iterations=2, batch_size=8, checkpoint=ckpt, options=options)
    with pytest.raises(ValueError, match="different run"):
        run(name, net(), images(), 0.6, iterations=2, batch_size=8, checkpoint=ckpt, options=options)


def test_str_runs_at_other_targets_reuse_finished_trials(tmp_path, monkeypatch):
    """Trials never look at the target: a second target reuses the first run's trials, with the same result
    as a run that computes them itself."""
    import baselines.soft_threshold as str_module

    calls = []
    original = str_module._trial
    monkeypatch.setattr(str_module, "_trial", lambda *a, **k: calls.append(a[2]) or original(*a, **k))

    def run_str(target, folder):
        return run(
            "str",
            net(),
            images(),
            target,
            iterations=2,
            batch_size=8,
            checkpoint=str(tmp_path / folder / f"str-{target}.pt"),
            options={"search_runs": 2},
        )

    run_str(0.6, "shared")
    first = list(calls)
    model, report = run_str(0.5, "shared")
    assert report.extra["trials"][0]["reused"] and report.extra["reused_trials"] >= 1
    assert calls[len(first) :] == [t["decay"] for t in report.extra["trials"] if not t.get("reused")]
    alone, alone_report = run_str(0.5, "alone")
    assert [t["decay"] for t in alone_report.extra["trials"]] == [t["decay"] for t in report.extra["trials"]]
    for a, b in zip(alone.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)


def test_option_overrides_are_checked_against_the_method():
    get_method("fcpts").check_overrides({"lr": 0.02, "reconstruction": "kl"})
    get_method("pot-erk").check_overrides({"iterations": 10, "fold_bn": False})
    get_method("uniform").check_overrides(None)
    with pytest.raises(ValueError, match="'pot-l2norm' has no option lr"):
        get_method("pot-l2norm").check_overrides({"lr": 0.02})  # POT's rates are lr_weight / lr_bias
    with pytest.raises(ValueError, match="'lamp' has no option iterations"):
        get_method("lamp").check_overrides({"iterations": 5})
    with pytest.raises(ValueError, match="has no option allocation"):
        get_method("pot-erk").check_overrides({"allocation": "l2norm"})  # pinned by the registry entry


def test_probmask_scores_learn_which_weights_matter():
    """All weights have magnitude 1, but only the first 4 inputs carry signal: magnitude (the export's
    tiebreak) cannot tell them apart, so keeping them shows the scores learned from the loss. Chance keeps
    8 of the 32 kept weights there."""
    torch.manual_seed(0)
    d, k = 16, 4
    x = torch.randn(2048, d) * torch.tensor([3.0] * k + [0.01] * (d - k))
    model = nn.Sequential(nn.Linear(d, 8, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.sign(torch.randn(8, d)))
    sparse, report = run("probmask", model, x, 0.75, iterations=200, batch_size=64)
    w = sparse[0].weight
    assert int((w != 0).sum()) == 32
    assert int((w[:, :k] != 0).sum()) >= 28
    assert 0 <= report.extra["scores_undecided_fraction"] <= 1


def test_probmask_noise_leaves_the_global_rng_alone_and_a_resumed_run_draws_the_same(tmp_path):
    """The relaxed masks' noise comes from the method's own generator, seeded per (seed, step)."""
    models = [net() for _ in range(3)]
    torch.manual_seed(123)
    before = torch.get_rng_state()
    reference, _ = run("probmask", models[0], FailingAt(images(), 10**9), 0.7, iterations=6, batch_size=8)
    assert torch.equal(torch.get_rng_state(), before)
    ckpt = str(tmp_path / "run.pt")
    with pytest.raises(KeyboardInterrupt):
        run("probmask", models[1], FailingAt(images(), 8 * 3 + 1), 0.7, iterations=6, batch_size=8, checkpoint=ckpt,
            options={"checkpoint_every_s": 0})  # fmt: skip
    resumed, report = run("probmask", models[2], FailingAt(images(), 10**9), 0.7, iterations=6, batch_size=8,
                          checkpoint=ckpt)  # fmt: skip
    assert report.history[0]["step"] == 0 and len(report.history) == 6
    assert all(torch.equal(a, b) for a, b in zip(reference.state_dict().values(), resumed.state_dict().values()))


def test_probmask_projection_decides_on_the_device():
    scores = [torch.full((10,), 0.4)]
    assert project_scores(scores, 0.5).item() == 0.0  # within budget already: nothing moves
    assert torch.equal(scores[0], torch.full((10,), 0.4))
    v = project_scores([torch.ones(10)], 0.3)
    assert isinstance(v, torch.Tensor) and v.item() == pytest.approx(0.7)


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
def test_probmask_layerwise_projection_moves_scores_exactly_as_the_flat_one(seed):
    """Summing layer by layer (bounded memory) changes only the float64 summation order: the float32 shift the
    scores take, and so every score, stay bit-identical (mid-run scores: many exactly 0 or 1, the rest spread)."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(16, 3, 3, 3), (64, 16, 3, 3), (10, 64), (1000,)]
    scores = [torch.rand(shape, generator=g) * 1.4 - 0.2 for shape in shapes]
    scores = [s.clamp(0, 1) for s in scores]
    for kept in (0.9, 0.5, 0.1):
        ours, reference = [s.clone() for s in scores], [s.clone() for s in scores]
        v = project_scores(ours, kept)
        v_ref = _projection_over_one_flat_copy(reference, kept)
        assert v.to(torch.float32) == v_ref.to(torch.float32)
        assert all(torch.equal(a, b) for a, b in zip(ours, reference))


@pytest.mark.parametrize("seed", range(4))
def test_probmask_projection_stopping_at_its_fixed_point_gives_what_every_halving_would(seed, monkeypatch):
    """The bisection stops once a halving leaves the bracket as it was; the v and scores are bit for bit those of
    all PROJECTION_BISECTIONS halvings (a check interval beyond them never stops early), scores spread or tied."""
    import baselines.probmask as probmask

    g = torch.Generator().manual_seed(seed)
    scores = [torch.rand(shape, generator=g).clamp(0.1, 0.9) for shape in ((64, 16, 3, 3), (10, 64), (999,))]
    if seed % 2:
        scores[2][:500] = 0.5  # a block of equal scores
    for kept in (0.9, 0.5, 0.1, 0.002):
        early, every = [s.clone() for s in scores], [s.clone() for s in scores]
        v_early = project_scores(early, kept)
        with monkeypatch.context() as m:
            m.setattr(probmask, "FIXED_POINT_CHECK_EVERY", probmask.PROJECTION_BISECTIONS + 1)
            v_every = project_scores(every, kept)
        assert v_early.item() == v_every.item() and v_early.dtype == torch.float64
        assert all(torch.equal(a, b) for a, b in zip(early, every))
