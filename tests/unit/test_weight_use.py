"""Layers that compute with something else than the weight they store are refused before any work."""

import copy
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrizations, parametrize, prune

import fcpts
from fcpts.core.masks import check_weight_used_as_stored
from fcpts.methods import get_method
from tests.unit.tiny import tiny_images, tiny_net

QUICK = {"iterations": 2, "batch_size": 8, "progress": False}

COMPUTED_WEIGHTS = {  # what makes layer 3's weight in its forward, the call that folds it, as the error names it
    "prune": (lambda m: prune.l1_unstructured(m, "weight", 0.3), prune.remove, "prune.remove(module, 'weight')"),
    "weight_norm": (
        parametrizations.weight_norm,
        parametrize.remove_parametrizations,
        "remove_parametrizations(module, 'weight')",
    ),
    "spectral_norm": (
        parametrizations.spectral_norm,
        parametrize.remove_parametrizations,
        "remove_parametrizations(module, 'weight')",
    ),
    "old weight_norm": (
        torch.nn.utils.weight_norm,
        lambda m, _: torch.nn.utils.remove_weight_norm(m),
        "remove_weight_norm(module)",
    ),
    "old spectral_norm": (
        torch.nn.utils.spectral_norm,
        lambda m, _: torch.nn.utils.remove_spectral_norm(m),
        "remove_spectral_norm(module)",
    ),
}


def with_computed_weight(maker: str) -> nn.Module:
    model = tiny_net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.nn.utils.weight_norm is deprecated, still used
        COMPUTED_WEIGHTS[maker][0](model[3])
    return model


@pytest.mark.parametrize("name", sorted(fcpts.METHODS))
@pytest.mark.parametrize("maker", sorted(COMPUTED_WEIGHTS))
def test_a_layer_that_computes_its_weight_is_refused_before_any_work_naming_the_call_that_folds_it(name, maker):
    """torch.nn.utils.prune's mask is applied at every forward: a method's zeros in that layer were overwritten
    by the next one (obs 'reached' 0.5), FCPTS failed in a deepcopy, a weight_norm layer in an AttributeError."""
    model = with_computed_weight(maker)
    before = copy.deepcopy(model.state_dict())
    fold = re.escape(COMPUTED_WEIGHTS[maker][2])
    with pytest.raises(TypeError, match=rf"compute their weight in their forward .*'3': .*{fold}"):
        fcpts.sparsify(model, tiny_images(), 0.5, method=name, options=get_method(name).make_options(QUICK))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("name", ["fcpts", "obs"])
@pytest.mark.parametrize("maker", sorted(COMPUTED_WEIGHTS))
def test_a_computed_weight_folded_as_the_error_says_runs_to_the_target(maker, name):
    model, options = with_computed_weight(maker), get_method(name).make_options(QUICK)
    with pytest.raises(TypeError, match="compute their weight"):  # kept dense, the hook-made ones broke deepcopy
        fcpts.sparsify(model, tiny_images(), 0.5, exclude="3", method=name, options=options)
    COMPUTED_WEIGHTS[maker][1](model[3], "weight")
    sparse, report = fcpts.sparsify(model, tiny_images(), 0.5, method=name, options=options)
    sparse(tiny_images())  # no forward of the returned model undoes its zeros
    assert report.achieved_sparsity == fcpts.sparsity_summary(sparse)[0] == 0.5


class StandardisedConv(nn.Conv2d):
    """timm's StdConv2d, written out: each filter standardised in the forward (BiT, NFNet)."""

    def forward(self, x):
        w = self.weight
        w = (w - w.mean((1, 2, 3), keepdim=True)) / (w.var((1, 2, 3), keepdim=True, unbiased=False) + 1e-6).sqrt()
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


def with_standardised_conv() -> nn.Module:
    model = tiny_net()
    standardised = StandardisedConv(8, 8, 3, padding=1)
    standardised.load_state_dict(model[3].state_dict())
    model[3] = standardised
    return model


@pytest.mark.parametrize("name", sorted(fcpts.METHODS))
def test_a_layer_that_standardises_its_weight_is_refused_before_any_work(name):
    """timm's resnetv2_50x1_bit reported 70.00% under global magnitude while its stem computed with 0% zeros."""
    model = with_standardised_conv()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(TypeError, match=r"1 layer\(s\) \(StandardisedConv\) compute with a transform .*\['3'\]"):
        fcpts.sparsify(model, tiny_images(), 0.5, method=name, options=get_method(name).make_options(QUICK))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    _, report = fcpts.sparsify(model, tiny_images(), 0.5, exclude="3", progress=False, method="global-magnitude")
    assert report.achieved_sparsity == 0.5  # kept dense, it is counted as what it is


def test_timm_standardised_convs_are_found_and_its_same_padding_conv_is_not():
    layers = pytest.importorskip("timm.layers")
    convs = {
        "std": layers.StdConv2d(4, 8, 3),
        "scaled": layers.ScaledStdConv2d(4, 8, 3),
        "std-same": layers.StdConv2dSame(4, 8, 3, stride=2),
        "same": layers.Conv2dSame(4, 8, 3, stride=2),  # pads in its forward, computes with the weight as stored
        "plain": nn.Conv2d(4, 8, 3, stride=2, dilation=2, groups=2),
        "linear": nn.Linear(4, 8),
    }
    with pytest.raises(TypeError, match=r"3 layer\(s\) \(ScaledStdConv2d, StdConv2d, StdConv2dSame\)"):
        check_weight_used_as_stored(convs)
    check_weight_used_as_stored({k: convs[k] for k in ("same", "plain", "linear")})


def test_the_probe_leaves_the_layer_its_mode_its_hooks_and_the_global_rng_as_they_were():
    """A user's hook collecting a layer's activations saw the probe's calls (the channels-last test did)."""
    model = with_standardised_conv().train()
    state, rng, seen = copy.deepcopy(model.state_dict()), torch.get_rng_state(), []
    for layer in model:
        layer.register_forward_pre_hook(lambda layer, inputs: seen.append(layer))
    with pytest.raises(TypeError):
        check_weight_used_as_stored({"3": model[3]})
    check_weight_used_as_stored({"0": model[0], "7": model[7]})
    assert model[3].training and torch.equal(torch.get_rng_state(), rng) and not seen
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_a_layer_whose_probe_overflows_is_left_to_the_run():
    """Weights near float32's largest overflow in the probe; the run's own finiteness checks name the step."""
    layer = nn.Linear(4, 4)
    with torch.no_grad():
        layer.weight.fill_(3e38)
    check_weight_used_as_stored({"layer": layer})
