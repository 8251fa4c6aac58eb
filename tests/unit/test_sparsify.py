"""fcpts.sparsify end to end on small models: exact target, plain output modules, determinism, resume."""

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

import fcpts
from fcpts.core.masks import sparsity_summary
from tests.unit.tiny import FailingAt, untimed


def tiny_net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 1),
        nn.Linear(1, 5),  # tiny layers: 8 and 5 weights
    )


def images(n=32, seed=0):
    return torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("target", [0.0, 0.5, 0.9, 0.99])
def test_exact_target_to_one_weight(target):
    model, report = fcpts.sparsify(tiny_net(), images(), target, iterations=4, batch_size=8, progress=False)
    achieved, per_layer = sparsity_summary(model)
    n = sum(r["numel"] for r in per_layer)
    assert round(achieved * n) == round(target * n)
    assert report.achieved_sparsity == achieved


def test_exact_target_with_all_weights_tied():
    """Every weight has the same magnitude: a threshold cannot separate them, the global order must."""
    model = tiny_net()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                m.weight.fill_(0.05)
    model, _ = fcpts.sparsify(model, images(), 0.7, iterations=0, progress=False)
    achieved, per_layer = sparsity_summary(model)
    n = sum(r["numel"] for r in per_layer)
    assert round(achieved * n) == round(0.7 * n)


def test_returns_plain_modules_with_zeros_stored():
    model, report = fcpts.sparsify(tiny_net(), images(), 0.6, iterations=3, batch_size=8, progress=False)
    assert not any(parametrize.is_parametrized(m) for m in model.modules())
    assert not model.training
    conv = model[0]
    assert type(conv) is nn.Conv2d and (conv.weight == 0).any()
    assert {r["name"] for r in report.per_layer} == {"0", "3", "7", "8"}
    assert len(report.history) == 3 and report.calibration_indices == list(range(32))


def test_deterministic_for_a_seed():
    a, ra = fcpts.sparsify(tiny_net(), images(), 0.8, iterations=5, batch_size=8, progress=False, seed=3)
    b, rb = fcpts.sparsify(tiny_net(), images(), 0.8, iterations=5, batch_size=8, progress=False, seed=3)
    for pa, pb in zip(a.state_dict().values(), b.state_dict().values()):
        assert torch.equal(pa, pb)
    assert untimed(ra.history) == untimed(rb.history)


def test_interrupted_run_resumes_to_the_same_result(tmp_path):
    x = images()
    opts = dict(iterations=6, batch_size=8, progress=False, seed=1)
    ref, _ = fcpts.sparsify(tiny_net(), FailingAt(x, fail_at=10**9), 0.8, **opts)
    ckpt = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        fcpts.sparsify(
            tiny_net(), FailingAt(x, fail_at=8 * 3 + 1), 0.8, checkpoint=str(ckpt), checkpoint_every_s=0, **opts
        )
    assert ckpt.exists()
    resumed, report = fcpts.sparsify(tiny_net(), FailingAt(x, fail_at=10**9), 0.8, checkpoint=str(ckpt), **opts)
    assert report.extra["resumed_from_step"] == 3
    for pa, pb in zip(ref.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(pa, pb)


def test_checkpoint_of_another_run_is_refused(tmp_path):
    ckpt = tmp_path / "run.pt"
    fcpts.sparsify(tiny_net(), images(), 0.8, iterations=2, batch_size=8, progress=False, checkpoint=str(ckpt))
    with pytest.raises(ValueError, match="different run"):
        fcpts.sparsify(tiny_net(), images(), 0.7, iterations=2, batch_size=8, progress=False, checkpoint=str(ckpt))


def test_torchvision_model_and_kept_dense_layers():
    torchvision = pytest.importorskip("torchvision")  # the library's tests run without the [tasks] extra too
    model = torchvision.models.mobilenet_v2(num_classes=10)
    x = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    model, report = fcpts.sparsify(
        model, x, 0.7, iterations=2, batch_size=4, progress=False, exclude=["classifier.1"], reconstruction="mse-blocks"
    )
    assert torch.count_nonzero(model.classifier[1].weight) == model.classifier[1].weight.numel()
    achieved, per_layer = sparsity_summary(model, exclude=["classifier.1"])
    n = sum(r["numel"] for r in per_layer)
    assert round(achieved * n) == round(0.7 * n)
    assert model.features[1].conv[0][0].groups > 1
    assert "features.1.conv.0.0" in {r["name"] for r in report.per_layer}  # depthwise convs are prunable too


def test_fixed_allocation_keeps_erk_rates():
    model, report = fcpts.sparsify(
        tiny_net(), images(), 0.8, iterations=4, batch_size=8, progress=False, learn_thresholds=False
    )
    assert report.method == "fcpts-fixed"
    for row in report.per_layer:
        assert abs(row["sparsity"] - row["initial_sparsity"]) * row["numel"] <= 1.0 + 1e-9


def test_histogram_bridge_and_squared_control_run():
    model, report = fcpts.sparsify(
        tiny_net(),
        images(),
        0.5,
        iterations=2,
        batch_size=8,
        progress=False,
        bridge="histogram",
        control_loss="squared",
        threshold_grad="ste",
    )
    assert report.options["bridge"] == "histogram"


def test_input_model_is_modified_in_place_but_teacher_is_a_copy():
    model = tiny_net()
    dense = copy.deepcopy(model)
    out, _ = fcpts.sparsify(model, images(), 0.5, iterations=1, batch_size=8, progress=False)
    assert out is model
    assert not torch.equal(out[0].weight, dense[0].weight)


def test_eval_mode_teacher_is_folded_and_gives_the_same_outputs():
    from fcpts.core.loop import frozen_teacher

    model = tiny_net().eval()
    model[1].running_mean.uniform_(-0.5, 0.5)
    model[1].running_var.uniform_(0.5, 2.0)
    teacher = frozen_teacher(model, "eval")
    assert isinstance(teacher[1], nn.Identity) and isinstance(model[1], nn.BatchNorm2d)
    x = images(4)
    assert torch.allclose(teacher(x), model(x), atol=1e-5)
    assert not any(p.requires_grad for p in teacher.parameters())


def test_blocks_are_found_in_stages_and_a_model_without_blocks_is_warned_about(caplog):
    import logging

    from fcpts.methods.fcpts import default_blocks

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)

        def forward(self, x):
            return x + self.conv(x)

    class RegStage(nn.Module):  # timm's stages hold their blocks as plain attributes b1, b2, ...
        def __init__(self):
            super().__init__()
            self.b1, self.b2 = Block(), Block()

        def forward(self, x):
            return self.b2(self.b1(x))

    class NoBlocks(nn.Module):  # layers as plain attributes: nothing to call a block
        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4 * 6 * 6, 3)

        def forward(self, x):
            return self.fc(self.conv(x).flatten(1))

    staged = nn.Module()
    staged.s1 = RegStage()
    assert default_blocks(staged) == ["s1.b1", "s1.b2"] and default_blocks(NoBlocks()) == []
    with caplog.at_level(logging.WARNING, logger="fcpts"):
        fcpts.sparsify(NoBlocks(), torch.randn(8, 3, 8, 8), 0.5, iterations=2, batch_size=4, progress=False)
    assert "found no blocks in NoBlocks" in caplog.text
