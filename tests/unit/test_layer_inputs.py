"""Layer inputs reached through kept nn.Sequential unit inputs are the ones a forward from the image gives,
with fewer forwards, and a model whose forward does more between its units is still served correctly."""

import copy

import pytest
import timm
import torch
from torch import nn

from baselines.obs import OBSOptions, obs
from fcpts.core.layer_inputs import LayerInputs, forward_order, input_of, sequential_units, unit_of
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
        order = forward_order(model, layers, batch(0), "obs")
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


def kept_units(monkeypatch, images: int, **options) -> dict[str, bool]:
    """{layer: whether obs served it from kept unit inputs} for a CIFAR ResNet-20 at 16 px."""
    import baselines.obs

    served: dict[str, bool] = {}

    class Recording(LayerInputs):
        def __call__(self, layer):
            yield from super().__call__(layer)
            served[layer] = self.unit is not None

    monkeypatch.setattr(baselines.obs, "LayerInputs", Recording)
    x = torch.randn(images, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    obs(cifar_resnet("resnet20").eval(), x, 0.8, OBSOptions(progress=False, batch_size=8, **options))
    return served


def test_obs_keeps_inputs_as_the_planned_number_of_images_would(monkeypatch):
    """With `choose_for`, 8 images keep a unit's inputs or reach it from the image as 32 images do against the
    same cache: the first stage's inputs (2 nets x 32 images x 16 KB) do not fit in 0.6 MB, the later ones do."""
    cache = dict(cache_bytes=6e5)
    full = kept_units(monkeypatch, 32, **cache)
    assert not full["layer1.0.conv1"] and full["layer2.1.conv1"] and full["layer3.1.conv1"]
    assert kept_units(monkeypatch, 8, choose_for={"images": 32}, **cache) == full
    own = kept_units(monkeypatch, 8, **cache)  # its own size: every unit's inputs fit (the stem and head are no units)
    assert all(served for layer, served in own.items() if layer.startswith("layer"))


@pytest.mark.parametrize("bad", [{"images": 0}, {"images": 8, "iterations": 4}, {"images": 2.5}, 32])
def test_obs_choose_for_names_what_it_needs(bad):
    with pytest.raises(ValueError, match="choose_for must be None or"):
        OBSOptions(choose_for=bad).validate()


def test_the_memory_doc_names_the_units_obs_reaches_from_the_image_at_the_papers_size():
    """docs/memory.md: at 10,240 images in two models, ResNet-18's units up to the last one but one have inputs
    over obs's cache."""
    import torchvision

    from tasks.grid.paths import REPO_ROOT

    model = torchvision.models.resnet18().eval()
    one = torch.randn(1, 3, 224, 224)
    sizes = {u: input_of(model, u, one).numel() * 4 * 10240 * 2 for u in sequential_units(model)}
    over = [u for u, size in sizes.items() if size > OBSOptions().cache_bytes]
    assert over == list(sizes)[:-1] == [u for u in sizes if u != "layer4.1"]
    doc = " ".join((REPO_ROOT / "docs" / "memory.md").read_text().split())
    most, least = sizes[over[0]] / 1e9, sizes[over[-1]] / 1e9
    assert f"units from the first stage to `{over[-1]}` ({most:.1f} GB down to {least:.1f} GB)" in doc
