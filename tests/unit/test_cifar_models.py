"""The CIFAR ResNets: option A (akamaster's checkpoints) and option B (the paper's dense models' architecture)."""

import pytest
import torch
from torch import nn

from fcpts.core.masks import prunable_layers
from tasks.grid.cifar_models import CIFAR_MODELS, cifar_resnet


@pytest.mark.parametrize("depth", [20, 32, 44, 56])
def test_option_b_adds_a_1x1_projection_where_the_shape_changes_and_nothing_else(depth):
    a, b = cifar_resnet(f"resnet{depth}"), cifar_resnet(f"resnet{depth}b")
    extra = {n: m for n, m in prunable_layers(b).items() if n not in prunable_layers(a)}
    assert sorted(extra) == ["layer2.0.shortcut.0", "layer3.0.shortcut.0"]
    assert [(m.kernel_size, m.stride, m.in_channels, m.out_channels) for m in extra.values()] == [
        ((1, 1), (2, 2), 16, 32),
        ((1, 1), (2, 2), 32, 64),
    ]
    assert isinstance(b.layer2[0].shortcut[1], nn.BatchNorm2d)
    # 16*32 + 32*64 conv weights and two BatchNorms' 2*(32+64) affine parameters
    assert sum(p.numel() for p in b.parameters()) - sum(p.numel() for p in a.parameters()) == 512 + 2048 + 192


def test_option_b_runs_and_every_name_is_buildable():
    assert len(CIFAR_MODELS) == 8
    out = cifar_resnet("resnet32b", 100)(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 100)
    with pytest.raises(ValueError, match="resnet32b"):
        cifar_resnet("resnet33")


@pytest.mark.parametrize("name", ["resnet20", "resnet20b"])
def test_in_place_relus_keep_every_value_gradient_and_block_output(name, monkeypatch):
    """The ReLUs work in place for memory; the values and gradients are those of out-of-place ones, bit for bit, and
    no block's output is changed after it is returned (FCPTS's block MSE reads them after the forward)."""
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))

    def forward_backward():
        torch.manual_seed(0)
        model = cifar_resnet(name).train()
        seen = []
        for block in [*model.layer1, *model.layer2, *model.layer3]:
            block.register_forward_hook(lambda _m, _i, out: seen.append((out, out.clone())))
        y = model(x)
        y.square().sum().backward()
        return y, {n: p.grad for n, p in model.named_parameters()}, seen

    y, grads, seen = forward_backward()
    assert len(seen) == 9 and all(torch.equal(out, at_return) for out, at_return in seen)
    monkeypatch.setattr(torch.nn.functional, "relu", lambda t, inplace=False: torch.relu(t))
    y_out_of_place, grads_out_of_place, _ = forward_backward()
    assert torch.equal(y, y_out_of_place)
    assert all(torch.equal(grads[n], grads_out_of_place[n]) for n in grads)
