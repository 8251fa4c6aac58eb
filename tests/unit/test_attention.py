"""nn.MultiheadAttention swapped for LinearAttention: the same outputs, the same Parameters, and every method then
prunes its projections; without the swap, the layer-wise methods say what to do before any work."""

import copy
import itertools
import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fcpts
from fcpts.core.attention import LinearAttention


class Block(nn.Module):
    """A pre-norm encoder block calling its attention as torchvision's ViT does: self_attention(x, x, x)."""

    def __init__(self, width=32):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.self_attention = nn.MultiheadAttention(width, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x):
        y = self.norm(x)
        x = x + self.self_attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(x)


class SmallViT(nn.Module):
    """8-px patches of a 32-px image, two blocks, a head: 16,704 Conv2d/Linear weights and 6,144 in the two
    in_proj_weight tensors, as torchvision's ViT at this size."""

    def __init__(self, width=32):
        super().__init__()
        self.patches = nn.Conv2d(3, width, 8, stride=8)
        self.blocks = nn.Sequential(Block(width), Block(width))
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.blocks(self.patches(x).flatten(2).transpose(1, 2)).mean(1))


def small_vit() -> nn.Module:
    torch.manual_seed(0)
    return SmallViT()


def images(n=16):
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(0))


CASES = list(itertools.product([True, False], [True, False], [True, False], ["none", "bool", "float", "padding"]))


@pytest.mark.parametrize(("batch_first", "bias", "need_weights", "mask"), CASES)
def test_linear_attention_computes_what_multihead_attention_does(batch_first, bias, need_weights, mask):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, bias=bias, batch_first=batch_first)
    linear = LinearAttention(copy.deepcopy(mha))
    x = torch.randn(3, 5, 16) if batch_first else torch.randn(5, 3, 16)
    attn_mask = {"bool": torch.triu(torch.ones(5, 5, dtype=torch.bool), 1), "float": torch.randn(5, 5)}.get(mask)
    padding = torch.tensor([[False] * 4 + [True]] * 3) if mask == "padding" else None
    for training, average in ((True, True), (False, False)):
        mha.train(training), linear.train(training)
        kwargs = dict(
            key_padding_mask=padding, need_weights=need_weights, attn_mask=attn_mask, average_attn_weights=average
        )
        (out, weights), (ours, our_weights) = mha(x, x, x, **kwargs), linear(x, x, x, **kwargs)
        torch.testing.assert_close(ours, out, rtol=1e-6, atol=1e-6)
        if need_weights:
            torch.testing.assert_close(our_weights, weights, rtol=1e-6, atol=1e-6)
        else:
            assert weights is None and our_weights is None


def test_the_swap_keeps_the_parameters_and_torchvisions_vit_output_and_swaps_back():
    vision_transformer = pytest.importorskip("torchvision.models.vision_transformer")  # not in tox's core env
    torch.manual_seed(0)
    model = vision_transformer.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
    ).eval()
    nn.init.normal_(model.heads.head.weight, std=0.02)  # torchvision starts the head at zero
    reference, x = copy.deepcopy(model), images(4)
    parameters = [id(p) for p in model.parameters()]
    assert fcpts.attention_as_linear(model) is model
    assert type(model.encoder.layers[0].self_attention) is LinearAttention
    assert [id(p) for p in model.parameters()] == parameters  # the same Parameters, none copied
    with torch.no_grad():  # eval without gradients: torchvision's fast path, another kernel
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-6)
    fcpts.attention_as_mha(model)
    assert type(model.encoder.layers[0].self_attention) is nn.MultiheadAttention
    assert [id(p) for p in model.parameters()] == parameters
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=0, atol=0)


@pytest.mark.parametrize("method", sorted(fcpts.METHODS))
def test_every_method_prunes_the_attention_projections_of_a_swapped_vit(method, caplog):
    options = {"progress": False}
    if fcpts.get_method(method).trains or method.startswith("pot"):
        options["iterations"] = 2
    if fcpts.get_method(method).trains:
        options["batch_size"] = 8
    with caplog.at_level(logging.WARNING, logger="fcpts"):
        sparse, report = fcpts.sparsify(fcpts.attention_as_linear(small_vit()), images(), 0.8, method=method, **options)
    assert "stay dense" not in caplog.text and "unprunable_weights" not in report.extra
    names = [r["name"] for r in report.per_layer]
    assert "blocks.0.self_attention.in_proj" in names and "blocks.1.self_attention.out_proj" in names
    if method != "str":  # STR reaches what its short search reaches, not the target
        assert report.achieved_sparsity == round(0.8 * 22848) / 22848  # 16,704 + 6,144 weights
    fcpts.attention_as_mha(sparse)
    packed = sparse.blocks[0].self_attention.in_proj_weight
    in_proj = next(r for r in report.per_layer if r["name"] == "blocks.0.self_attention.in_proj")
    assert float((packed == 0).float().mean()) == pytest.approx(in_proj["sparsity"])


@pytest.mark.parametrize("method", ["pot-l2norm", "pot-erk", "obs"])
def test_layer_wise_methods_on_multihead_attention_name_the_swap_before_any_work(method):
    out_projs = r"\['blocks.0.self_attention.out_proj', 'blocks.1.self_attention.out_proj'\]"
    said = rf"never calls 2 of its layers \(e.g. {out_projs}\)"
    with pytest.raises(ValueError, match=said + r".*first: fcpts.attention_as_linear\(model\); or keep them dense"):
        fcpts.sparsify(small_vit(), images(), 0.8, method=method, progress=False)


class FunctionalAttention(nn.Module):
    """Attention that applies its Linears' weights itself, as torchvision's Swin does (F.linear on qkv.weight)."""

    def __init__(self, width=8):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        tokens = self.stem(x).flatten(2).transpose(1, 2)
        q, k, v = F.linear(tokens, self.qkv.weight, self.qkv.bias).chunk(3, -1)
        mixed = F.linear(F.scaled_dot_product_attention(q, k, v), self.proj.weight, self.proj.bias)
        return self.head(mixed.mean(1))


@pytest.mark.parametrize(("method", "budget"), [("pot-l2norm", {"iterations": 2}), ("obs", {})])
def test_layers_whose_parent_applies_their_weights_are_named_and_can_be_kept_dense(method, budget):
    x = torch.randn(8, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = FunctionalAttention()
    states = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(
        ValueError, match=r"never calls 2 of its layers \(e.g. \['qkv', 'proj'\]\).*itself; keep them dense"
    ):
        fcpts.sparsify(model, x, 0.5, method=method, progress=False, **budget)
    assert all(torch.equal(v, states[k]) for k, v in model.state_dict().items())  # refused before any change
    assert model.training  # and left in the mode it came in
    _, report = fcpts.sparsify(model, x, 0.5, method=method, progress=False, exclude=["qkv", "proj"], **budget)
    assert [r["name"] for r in report.per_layer] == ["stem", "head"] and report.achieved_sparsity == 0.5


def test_the_unprunable_warning_names_the_swap(caplog):
    with caplog.at_level(logging.WARNING, logger="fcpts"):
        fcpts.sparsify(small_vit(), images(), 0.8, method="global-magnitude", progress=False)
    assert "6,144 weights in 2 tensors (MultiheadAttention.in_proj_weight)" in caplog.text
    assert "fcpts.attention_as_linear(model) first makes attention's projections Linear layers" in caplog.text


@pytest.mark.parametrize(
    ("options", "said"),
    [({"kdim": 8, "vdim": 8}, "separate kdim/vdim projections"), ({"add_bias_kv": True}, "add_bias_kv")],
)
def test_attention_without_a_stacked_projection_is_refused(options, said):
    with pytest.raises(ValueError, match=f"with {said} has no LinearAttention form"):
        LinearAttention(nn.MultiheadAttention(16, 4, **options))


def test_one_unsupported_attention_refuses_the_whole_swap_before_any_change():
    model = nn.Sequential(nn.MultiheadAttention(16, 4), nn.MultiheadAttention(16, 4, add_zero_attn=True))
    with pytest.raises(ValueError, match=r"add_zero_attn has no LinearAttention form.*filter_fn"):
        fcpts.attention_as_linear(model)
    assert [type(m) for m in model] == [nn.MultiheadAttention] * 2
    fcpts.attention_as_linear(model, filter_fn=lambda module, name: not module.add_zero_attn)
    assert [type(m) for m in model] == [LinearAttention, nn.MultiheadAttention]


def test_cross_attention_is_refused_and_a_model_that_is_one_attention_is_swapped_whole():
    linear = fcpts.attention_as_linear(nn.MultiheadAttention(16, 4, batch_first=True))
    assert type(linear) is LinearAttention
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    with pytest.raises(ValueError, match="self-attention"):
        linear(x, memory, memory)
    assert type(fcpts.attention_as_mha(linear)) is nn.MultiheadAttention
