"""FCPTS+: with every change off it is FCPTS; each change does what it says; exact target throughout."""

import copy

import pytest
import torch
from torch import nn

import fcpts.methods.fcpts as loop_module
from fcpts.core.allocation import erk_rates
from fcpts.core.calibration import Calibration
from fcpts.core.loop import kl_distill
from fcpts.core.masks import prunable_layers
from fcpts.methods import METHODS, get_method, thresholds
from fcpts.methods.fcpts_plus import FCPTSPlusOptions, cubic_ramp


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.Flatten(),
        nn.Linear(8 * 6 * 6, 4),
    )  # fmt: skip


def images(n: int = 32) -> torch.Tensor:
    return torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(1))


BUDGET = {"iterations": 6, "batch_size": 8, "progress": False, "channels_last": False}


def zeros(model: nn.Module) -> int:
    return sum(int((m.weight == 0).sum()) for m in prunable_layers(model).values())


def test_with_every_change_off_it_is_fcpts():
    a, _ = get_method("fcpts")(net(), images(), 0.7, **BUDGET)
    b, report = get_method("fcpts-plus")(net(), images(), 0.7, **BUDGET, ramp=0.0, block_weight=1.0)
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name
    assert report.method == "fcpts-plus" and METHODS["fcpts-plus"].in_paper is False


@pytest.mark.parametrize(
    "change",
    [
        {},  # the defaults: no ramp at 70%
        {"ramp": 0.5},
        {"block_weight": 2.0},
    ],
)
def test_each_change_keeps_the_exact_target(change):
    model, report = get_method("fcpts-plus")(net(), images(), 0.7, **BUDGET, **change)
    n = sum(m.weight.numel() for m in prunable_layers(model).values())
    assert zeros(model) == round(0.7 * n)
    assert report.achieved_sparsity == pytest.approx(round(0.7 * n) / n)


def test_cubic_ramp_rises_from_its_start_to_the_target_and_stays():
    at = cubic_ramp(0.9, 0.5, 100)
    assert at(0) == pytest.approx(0.45)
    values = [at(s) for s in range(0, 101)]
    assert all(b >= a for a, b in zip(values, values[1:]))
    assert at(100) == at(500) == 0.9


def test_the_default_is_the_measured_choice_a_ramp_from_90_percent_and_the_blocks_weighed_by_their_gradient():
    defaults = FCPTSPlusOptions()
    assert (defaults.ramp, defaults.ramp_start) == ("auto", 0.5)
    # held-out training images chose the ramp at 90% and none at 80% (docs/notebook/heldout-choices.md)
    assert [defaults.ramp_for(t) for t in (0.5, 0.7, 0.8, 0.89, 0.9, 0.95)] == [0.0, 0.0, 0.0, 0.0, 0.5, 0.5]
    assert FCPTSPlusOptions(ramp=0.25).ramp_for(0.5) == 0.25
    assert (defaults.block_weight, defaults.block_balance) == ("auto", 1.0)  # ahead on CIFAR-10, level on CIFAR-100
    assert FCPTSPlusOptions.DEFAULTS_BEFORE == {"block_weight": 1.0}  # what records made before the change ran with
    assert defaults.temperature == METHODS["fcpts"].options().temperature == 4.0  # 8 did not carry to 1,600 steps


def test_a_ramp_holds_erk_rates_of_each_level_then_lets_the_thresholds_learn(monkeypatch):
    held = []
    real = thresholds.pin_rates
    monkeypatch.setattr(
        thresholds, "pin_rates", lambda p, layers, rates: held.append(dict(rates)) or real(p, layers, rates)
    )
    # block weight given: "auto" pins step 0's rates once more before the loop, to measure at its masks
    _, report = get_method("fcpts-plus")(
        net(), images(), 0.8, **{**BUDGET, "iterations": 12}, ramp=0.5, block_weight=1.0
    )
    level = cubic_ramp(0.8, 0.5, 6)
    layers = prunable_layers(net())
    assert held == [erk_rates(layers, level(step)) for step in range(6)]  # the ramp's 6 steps, then none
    assert report.extra["sparsity_before_exact_step"] == pytest.approx(0.8, abs=0.01)


@pytest.mark.parametrize("power", [0.0, 0.5])
def test_erk_power_sets_the_starting_rates_and_the_rates_a_ramp_holds(power, monkeypatch):
    layers = prunable_layers(net())
    _, report = get_method("fcpts-plus")(net(), images(), 0.7, **{**BUDGET, "iterations": 0}, ramp=0, erk_power=power)
    start = {r["name"]: r["initial_sparsity"] for r in report.per_layer}
    assert start == erk_rates(layers, 0.7, power)
    if power == 0:
        assert list(start.values()) == pytest.approx([0.7] * len(start))  # one rate everywhere
    held = []
    real = thresholds.pin_rates
    monkeypatch.setattr(
        thresholds, "pin_rates", lambda p, layers, rates: held.append(dict(rates)) or real(p, layers, rates)
    )
    options = {**BUDGET, "iterations": 4, "block_weight": 1.0}  # "auto" pins step 0 once more for its probe
    get_method("fcpts-plus")(net(), images(), 0.8, **options, ramp=0.5, erk_power=power)
    level = cubic_ramp(0.8, 0.5, 2)
    assert held == [erk_rates(layers, level(step), power) for step in range(2)]


@pytest.mark.parametrize(("target", "ramped"), [(0.8, 0.0), (0.9, 0.5)])
def test_the_default_ramp_follows_the_target_and_the_report_says_which(target, ramped, monkeypatch):
    held = []
    real = thresholds.pin_rates
    monkeypatch.setattr(
        thresholds, "pin_rates", lambda p, layers, rates: held.append(dict(rates)) or real(p, layers, rates)
    )
    _, report = get_method("fcpts-plus")(net(), images(), target, **{**BUDGET, "iterations": 12}, block_weight=1.0)
    assert report.extra["ramp"] == ramped and len(held) == round(ramped * 12)
    assert report.options["ramp"] == "auto"


def test_block_weight_weighs_the_blocks_against_the_output_kl():
    """Weight 0 is the output KL alone (the paper's reconstruction), bit for bit; another weight another model."""
    kl_only, _ = get_method("fcpts-plus")(net(), images(), 0.7, **BUDGET, ramp=0.0, reconstruction="kl")
    zero, _ = get_method("fcpts-plus")(net(), images(), 0.7, **BUDGET, ramp=0.0, block_weight=0.0)
    one, _ = get_method("fcpts-plus")(net(), images(), 0.7, **BUDGET, ramp=0.0, block_weight=1.0)
    two, _ = get_method("fcpts-plus")(net(), images(), 0.7, **BUDGET, ramp=0.0, block_weight=2.0)
    for (name, p), q in zip(kl_only.state_dict().items(), zero.state_dict().values()):
        assert torch.equal(p, q), name
    assert not torch.equal(one[0].weight, two[0].weight)


BUDGET_W1 = {**BUDGET, "iterations": 2, "block_weight": 1.0}  # the levels below are those of weight 1's two steps


def test_masks_far_off_target_before_the_exact_step_are_warned_of(caplog):
    # a ramp over every step ends one level short of the target: 75% against 80% at the last of two steps
    with caplog.at_level("WARNING", logger="fcpts"):
        _, report = get_method("fcpts-plus")(net(), images(), 0.8, **BUDGET_W1, ramp=1.0)
    assert report.extra["sparsity_before_exact_step"] == pytest.approx(0.75, abs=0.01)
    assert "held 75." in caplog.text and "against the 80.00% target" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="fcpts"):
        get_method("fcpts-plus")(net(), images(), 0.8, **BUDGET_W1, ramp=0.0)
    assert "learned masks held" not in caplog.text  # on target (ERK rates, no learning to drift): no warning


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="block_weight"):
        FCPTSPlusOptions(block_weight=-1).validate()
    with pytest.raises(ValueError, match="ramp"):
        FCPTSPlusOptions(ramp=1.5).validate()
    with pytest.raises(ValueError, match="option erk_power must be >= 0, got -1"):
        FCPTSPlusOptions(erk_power=-1).validate()
    with pytest.raises(ValueError, match="option erk_power='auto' of FCPTSPlusOptions must be"):
        FCPTSPlusOptions(erk_power="auto").check_types()  # type: ignore[arg-type]


def test_auto_block_weight_is_the_ratio_of_the_two_gradients_on_the_probe_batches():
    """A hand-check on one linear layer that is its own block: the weight is ||grad KL|| / ||grad MSE|| over the
    calibration's first batch, times `balance`; both models come back unchanged (BN statistics included)."""
    torch.manual_seed(3)
    student, teacher = (
        nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4)),
        nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4)),
    )
    options = loop_module.FCPTSOptions(block_names=["0"])
    reconstruction = loop_module._Reconstruction(student, teacher, options, loop_module.Variant())
    calib = Calibration(torch.randn(16, 5), 16, seed=0)
    before = copy.deepcopy(student.state_dict()), copy.deepcopy(teacher.state_dict())
    params = list(student.parameters())
    batches = loop_module.StepBatches(calib, torch.device("cpu"))
    measured = reconstruction.balance(student, teacher, batches, params, balance=0.5, batches=1)
    weight = reconstruction.weight
    for model, state in zip((student, teacher), before):
        for name, value in model.state_dict().items():
            assert torch.equal(value, state[name]), name

    x = calib.batch(0)
    student.train(), teacher.train()
    s_block, s_out = student[0](x), student(x)
    with torch.no_grad():
        t_block, t_out = teacher[0](x), teacher(x)
    kl_grad = torch.autograd.grad(kl_distill(s_out, t_out, 4.0), params, retain_graph=True)
    mse_grad = torch.autograd.grad(((s_block - t_block) ** 2).mean(), params[:2])  # BN gets no block gradient
    norm = lambda gs: float(torch.sqrt(sum(g.square().sum() for g in gs)))  # noqa: E731
    assert measured["kl_grad_norm"] == pytest.approx(norm(kl_grad), rel=1e-5)
    assert measured["blocks_grad_norm"] == pytest.approx(norm(mse_grad), rel=1e-5)
    assert weight == pytest.approx(0.5 * norm(kl_grad) / norm(mse_grad), rel=1e-5) == measured["chosen"]


def test_auto_block_weight_runs_as_the_chosen_weight_given_as_a_number():
    """The probe leaves no trace: the run equals, bit for bit, one with the chosen weight given; twice the balance
    chooses twice the weight; the choice is in the report."""
    options = {**BUDGET, "ramp": 0.5, "balance_batches": 2}
    auto, report = get_method("fcpts-plus")(net(), images(), 0.7, **options, block_weight="auto")
    chosen = report.extra["block_weight"]
    assert chosen["balance"] == 1.0 and chosen["probe_batches"] == 2 and chosen["chosen"] > 0
    assert report.wall_s >= chosen["wall_s"] > 0  # the probe counts in the method's time
    given, _ = get_method("fcpts-plus")(net(), images(), 0.7, **options, block_weight=chosen["chosen"])
    for (name, p), q in zip(auto.state_dict().items(), given.state_dict().values()):
        assert torch.equal(p, q), name
    _, doubled = get_method("fcpts-plus")(net(), images(), 0.7, **options, block_weight="auto", block_balance=2.0)
    assert doubled.extra["block_weight"]["chosen"] == pytest.approx(2 * chosen["chosen"])
    assert zeros(auto) == round(0.7 * sum(m.weight.numel() for m in prunable_layers(auto).values()))


def test_auto_block_weight_with_the_output_kl_alone_weighs_nothing():
    """With reconstruction="kl" there are no blocks: no probe, the same model as any block weight."""
    options = {**BUDGET, "ramp": 0.5, "reconstruction": "kl"}
    auto, report = get_method("fcpts-plus")(net(), images(), 0.7, **options, block_weight="auto")
    plain, _ = get_method("fcpts-plus")(net(), images(), 0.7, **options, block_weight=1.0)
    assert "block_weight" not in report.extra
    for (name, p), q in zip(auto.state_dict().items(), plain.state_dict().values()):
        assert torch.equal(p, q), name


def test_auto_block_weight_needs_a_positive_balance():
    with pytest.raises(ValueError, match="block_balance must be > 0"):
        FCPTSPlusOptions(block_weight="auto", block_balance=0).validate()
    with pytest.raises(ValueError, match="block_weight.*'auto' or a number"):
        FCPTSPlusOptions(block_weight="balanced").validate()
