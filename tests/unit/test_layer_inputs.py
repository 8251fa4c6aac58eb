"""Layer inputs reached through kept nn.Sequential unit inputs are the ones a forward from the image gives,
with fewer forwards, and a model whose forward does more between its units is still served correctly."""

import copy

import pytest
import timm
import torch
from torch import nn

from baselines.obs import OBSOptions, forward_order, obs
from fcpts.core.layer_inputs import LayerInputs, sequential_units, unit_of
from fcpts.core.masks import prunable_layers
from tasks.grid.cifar_models import cifar_resnet


def batches(n_batches=3, size=4, hw=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    data = [torch.randn(size, 3, hw, hw, generator=g) for _ in range(n_batches)]
    return (lambda b: data[b]), n_batches


class Halving(nn.Module):
    """A forward that changes the values between two units of a Sequential it calls piece by piece."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.body = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(4, 4, 1))

    def forward(self, x):
        x = self.body[1](self.body[0](self.stem(x)))
        return self.body[2](x / 2)


def test_units_of_nested_sequentials_form_one_chain():
    model = timm.create_model("efficientnet_lite0", pretrained=False, num_classes=10)
    units = sequential_units(model)
    assert units["blocks.0.0"] == ("blocks", 0) and units["blocks.1.0"] == ("blocks", 1)
    assert units["blocks.6.0"][1] == len([u for u, (c, _) in units.items() if c == "blocks"]) - 1
    assert unit_of("blocks.2.1.conv_pw", units) == "blocks.2.1" and unit_of("conv_stem", units) is None
    assert unit_of("layer2.2.conv1", sequential_units(cifar_resnet("resnet20"))) == "layer2.2"


@pytest.mark.parametrize(
    "make",
    [
        lambda: cifar_resnet("resnet20"),
        lambda: timm.create_model("efficientnet_lite0", pretrained=False, num_classes=10),
        Halving,
    ],
)
def test_the_same_inputs_as_a_forward_from_the_image(make):
    """Layer by layer in forward order, with each layer changed after its inputs were taken (as a
    pruning method does), reuse gives bit-identical inputs, in the dense copy too; so does reuse bounded by
    max_bytes, which keeps no more than that (units whose inputs do not fit are reached from the image)."""
    batch, n = batches()
    runs, bound = {}, 0.0
    for reuse in (True, False, "bounded"):
        torch.manual_seed(0)
        model = make().eval()
        dense = copy.deepcopy(model)
        layers = prunable_layers(model)
        order = forward_order(model, layers, batch(0))
        calls = []
        for m in model.modules():
            m.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        inputs = LayerInputs(
            [model, dense], batch, n, reuse=bool(reuse), max_bytes=bound if reuse == "bounded" else 1e30
        )
        seen, most = [], 0
        for name in order:
            seen.append([[x.clone() for x in xs] for xs in inputs(name)])
            most = max(most, sum(x.numel() * x.element_size() for xs in inputs.kept for x in xs))
            with torch.no_grad():
                layers[name].weight.mul_(0.5)
        runs[reuse] = (seen, len(calls), most)
        bound = most / 2 if reuse is True else bound  # the largest units no longer fit, smaller ones do
    for bounded in (True, "bounded"):
        for got, expected in zip(runs[bounded][0], runs[False][0]):
            assert all(torch.equal(a, b) for g, e in zip(got, expected) for a, b in zip(g, e))
    assert runs[True][1] < runs["bounded"][1] < runs[False][1] or make is Halving
    assert 0 < runs["bounded"][2] <= runs[True][2] / 2 or make is Halving


def test_a_forward_that_changes_values_between_units_falls_back_to_the_image():
    batch, n = batches()
    model = Halving().eval()
    inputs = LayerInputs([model], batch, n)
    for name in ("stem", "body.0", "body.2"):
        got = [xs[0] for xs in inputs(name)]
    assert inputs.broken == {"body"}
    with torch.no_grad():
        expected = model.body[1](model.body[0](model.stem(batch(1)))) / 2
    assert torch.equal(got[1], expected)


def test_obs_prunes_the_same_with_and_without_reuse():
    x = torch.randn(24, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    nets = []
    for reuse, cache_bytes in ((True, 4e9), (False, 4e9), (True, 2e5)):
        torch.manual_seed(0)
        options = OBSOptions(progress=False, batch_size=10, reuse_inputs=reuse, cache_bytes=cache_bytes)
        net, _ = obs(cifar_resnet("resnet20").eval(), x, 0.8, options)
        nets.append(net.state_dict())
    for other in nets[1:]:
        assert all(torch.equal(v, other[k]) for k, v in nets[0].items())
