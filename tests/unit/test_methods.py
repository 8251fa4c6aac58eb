"""The registry and the defining behaviour of STR and ProbMask."""

import pytest
import torch
from torch import nn

from baselines.probmask import export_masks, kept_fraction, relaxed_masked_weight
from baselines.soft_threshold import SoftThreshold
from fcpts.core.masks import sparsity_summary
from fcpts.methods import get_method
from tests.conftest import DEVICES
from tests.unit.tiny import FailingAt, grid_run, tiny_images, tiny_net

net, images, run = tiny_net, tiny_images, grid_run


def test_an_unknown_method_names_the_available_ones():
    with pytest.raises(ValueError, match="available"):
        get_method("obc")


def test_str_shrinks_kept_weights_and_reports_what_it_reached(caplog):
    p = SoftThreshold(s_init=0.0)  # threshold sigmoid(0) = 0.5
    assert p(torch.tensor([-2.0, 0.3, 0.75])).tolist() == [-1.5, 0.0, 0.25]
    with caplog.at_level("WARNING", logger="fcpts"):
        model, report = run("str", net(), images(), 0.6, iterations=3, batch_size=8, options={"search_runs": 2})
    assert len(report.extra["trials"]) == 2
    assert report.achieved_sparsity == pytest.approx(sparsity_summary(model)[0])
    assert not report.extra["converged_to_target"]  # 3 steps a trial: far from 0.6
    missed = f"MISSED THE TARGET: str reached {report.achieved_sparsity:.2%}, not 60.00% (more than its tolerance 0.50%"
    assert report.summary().splitlines()[0].startswith(missed) and missed in caplog.text


def test_probmask_export_prunes_weights_that_are_already_zero_first():
    """A zero weight keeps its score (its score gets no gradient), so it can rank high; kept, it would spend
    budget on nothing and leave the model sparser than the target (Lite0 at 50%: 50.13%)."""
    scores = {"a": torch.tensor([0.9, 0.8, 0.2, 0.1])}
    weights = {"a": torch.tensor([0.0, 1.0, 2.0, 3.0])}
    assert export_masks(scores, weights, 0.5)["a"].tolist() == [False, True, True, False]
    assert export_masks(scores, {"a": weights["a"] + 1}, 0.5)["a"].tolist() == [True, True, False, False]


def test_probmask_masked_weights_are_never_denormal():
    """At the end of the temperature schedule most relaxed masks underflow; a denormal masked weight would slow
    every CPU convolution several times over, so a negligible mask is zero."""
    weight, scores = torch.full((1000,), 0.05), torch.linspace(1e-6, 0.5, 1000)
    masked = relaxed_masked_weight(weight, scores, torch.full((1000,), 0.5), 33.0)
    tiny = (masked != 0) & (masked.abs() < torch.finfo(masked.dtype).tiny)
    assert not tiny.any() and (masked == 0).any() and (masked != 0).any()


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


@pytest.mark.parametrize("device", DEVICES)
def test_probmask_draws_its_noise_again_in_backward_instead_of_keeping_it(device, monkeypatch):
    """The noise u is not held from forward to backward (one weight-sized tensor a layer, 1.2 GB on ViT-L): the
    backward draws it again from the generator's kept state, so the gradients are bit for bit those of a u kept,
    and the generator ends the forward where one draw leaves it (the next layer's noise is as before)."""
    import weakref

    import baselines.probmask as probmask

    drawn = []
    real = probmask.uniform_noise

    def tracked(scores, noise):
        u = real(scores, noise)
        drawn.append(weakref.ref(u))
        return u

    monkeypatch.setattr(probmask, "uniform_noise", tracked)
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(6, 5, generator=g).to(device).requires_grad_()
    param = probmask.ProbMaskParam(weight.shape, torch.Generator(device=device).manual_seed(7)).to(device)
    with torch.no_grad():
        param.scores.copy_(torch.rand(6, 5, generator=g))
    param.inv_temperature = 3.0
    weights = torch.arange(30.0, device=device).view(6, 5)
    out = param(weight)
    assert drawn and all(ref() is None for ref in drawn)  # nothing holds u between forward and backward
    after_forward = param.noise.get_state()
    (out * weights).sum().backward()

    reference_noise = torch.Generator(device=device).manual_seed(7)
    u = real(param.scores, reference_noise)
    assert torch.equal(after_forward, reference_noise.get_state())
    w, s = weight.detach().clone().requires_grad_(), param.scores.detach().clone().requires_grad_()
    (probmask.relaxed_masked_weight(w, s, u, 3.0) * weights).sum().backward()
    assert torch.equal(out, probmask.relaxed_masked_weight(w, s, u, 3.0))
    assert torch.equal(weight.grad, w.grad) and torch.equal(param.scores.grad, s.grad)
