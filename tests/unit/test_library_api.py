"""The library's entry points as a user calls them: options objects, method choice, calibration types, targets,
layer names, and a report that reads well."""

from fractions import Fraction

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, SubsetRandomSampler, TensorDataset

import fcpts
from fcpts.core.masks import NoPrunableLayersError
from fcpts.methods import METHODS, get_method
from tests.unit.tiny import tiny_net

QUICK = {"iterations": 2, "batch_size": 8, "progress": False}


def images(n=16, seed=0):
    return torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(seed))


def zero_count(model):
    return sum(int((m.weight == 0).sum()) for m in fcpts.core.masks.prunable_layers(model).values())


def test_options_object_alone_and_with_layer_choices_beside_it():
    opts = fcpts.FCPTSOptions(iterations=1, progress=False)
    _, report = fcpts.sparsify(tiny_net(), images(), 0.5, options=opts)
    assert report.options["iterations"] == 1 and len(report.history) == 1
    _, report = fcpts.sparsify(tiny_net(), images(), 0.5, options=opts, exclude="7", filter_fn=lambda m, n: n != "0")
    assert [r["name"] for r in report.per_layer] == ["3"]
    assert opts.exclude == [] and opts.filter_fn is None  # the caller's object is left alone


def test_an_option_set_twice_to_different_values_is_refused():
    opts = fcpts.FCPTSOptions(iterations=1, progress=False, exclude=["7"])
    with pytest.raises(TypeError, match="exclude set both in the options object and as a keyword"):
        fcpts.sparsify(tiny_net(), images(), 0.5, options=opts, exclude=["0"])
    fcpts.sparsify(tiny_net(), images(), 0.5, options=opts, exclude="7")  # the same value twice is fine


def test_another_methods_options_class_is_a_type_error_naming_the_expected_one():
    with pytest.raises(TypeError, match="'pot-l2norm' takes POTOptions options, got FCPTSOptions"):
        fcpts.sparsify(tiny_net(), images(), 0.5, method="pot-l2norm", options=fcpts.FCPTSOptions())
    with pytest.raises(TypeError, match="'fcpts' takes FCPTSOptions options, got MagnitudeOptions"):
        get_method("fcpts")(tiny_net(), images(), 0.5, get_method("uniform").options())


def test_fixed_options_of_a_method_apply_to_an_options_object():
    opts = fcpts.FCPTSOptions(iterations=1, progress=False)
    _, report = fcpts.sparsify(tiny_net(), images(), 0.5, method="fcpts-fixed", options=opts)
    assert report.method == "fcpts-fixed" and report.options["learn_thresholds"] is False


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_registered_method_through_sparsify_at_target_zero_prunes_nothing(name):
    """One call reaches every method, and target 0 is exact in each: not one weight pruned."""
    options = get_method(name).make_options({**QUICK, "seed": 0})
    if name == "str":
        options.search_runs = 1
    sparse, report = fcpts.sparsify(tiny_net(), images(), 0, method=name, options=options)
    assert zero_count(sparse) == 0
    assert report.target_sparsity == 0.0 and report.achieved_sparsity == 0.0


@pytest.mark.parametrize("name", ["uniform", "erk", "pot-erk", "fcpts", "magnitude-bn"])
def test_target_zero_on_a_model_with_zeros_keeps_them_and_prunes_nothing_more(name):
    """Pretrained models hold a few exact zeros; target 0 (below them) must not fail to distribute its count."""
    model = tiny_net()
    with torch.no_grad():
        model[3].weight[0, 0] = 0.0  # one 3x3 kernel of zeros
    options = get_method(name).make_options(QUICK)
    sparse, report = fcpts.sparsify(model, images(), 0.0, method=name, options=options)
    assert zero_count(sparse) == 9 and report.achieved_sparsity == pytest.approx(9 / 824)


@pytest.mark.parametrize(
    "calibration",
    [
        TensorDataset(images(), torch.zeros(16)),
        DataLoader(images(), batch_size=5),
        DataLoader(TensorDataset(images(), torch.zeros(16)), batch_size=4, shuffle=True),
    ],
    ids=["dataset-pairs", "loader-tensors", "loader-pairs"],
)
def test_calibration_as_dataset_or_dataloader_gives_the_tensor_run(calibration):
    """A DataLoader over the whole dataset runs as that dataset: the same batches as the tensor itself."""
    ref, _ = fcpts.sparsify(tiny_net(), images(), 0.5, **QUICK)
    out, report = fcpts.sparsify(tiny_net(), calibration, 0.5, **QUICK)
    assert report.calibration_indices == list(range(16))
    for a, b in zip(ref.state_dict().values(), out.state_dict().values()):
        assert torch.equal(a, b)


def test_dataloader_of_a_subset_or_a_stream_is_read_once():
    class Stream(IterableDataset):
        def __iter__(self):
            yield from ((x, 0) for x in images(12))

    sampler = SubsetRandomSampler(list(range(6)), generator=torch.Generator().manual_seed(0))
    subset = DataLoader(TensorDataset(images()), sampler=sampler, batch_size=4)
    for loader, n in ((subset, 6), (DataLoader(Stream(), batch_size=5), 12)):
        _, report = fcpts.sparsify(tiny_net(), loader, 0.5, **QUICK)
        assert report.calibration_indices == list(range(n))
    with pytest.raises(TypeError, match="calibration item 0 is a str"):
        fcpts.sparsify(tiny_net(), DataLoader(["a", "b"]), 0.5, **QUICK)


def test_exclude_takes_one_name_or_a_list():
    _, one = fcpts.sparsify(tiny_net(), images(), 0.5, exclude="7", **QUICK)
    _, listed = fcpts.sparsify(tiny_net(), images(), 0.5, exclude=["7"], **QUICK)
    assert [r["name"] for r in one.per_layer] == [r["name"] for r in listed.per_layer] == ["0", "3"]
    assert one.options["exclude"] == ["7"]
    with pytest.raises(TypeError, match="exclude takes layer names"):
        fcpts.sparsify(tiny_net(), images(), 0.5, exclude=[7], **QUICK)


@pytest.mark.parametrize(
    "target", [np.float32(0.5), np.float64(0.5), torch.tensor(0.5), np.array(0.5), Fraction(1, 2), 0.5]
)
def test_any_real_number_like_target(target):
    _, report = fcpts.sparsify(tiny_net(), images(), target, method="global-magnitude", progress=False)
    assert isinstance(report.target_sparsity, float) and report.target_sparsity == 0.5
    assert report.achieved_sparsity == 0.5


@pytest.mark.parametrize(
    "target, error, message",
    [
        ("0.5", TypeError, "real number"),
        (True, TypeError, "real number"),
        (None, TypeError, "real number"),
        (0.5j, TypeError, "real number"),
        (torch.tensor([0.5, 0.6]), TypeError, "one real number"),
        (torch.tensor(True), TypeError, "real number"),
        (float("nan"), ValueError, r"\[0, 1\)"),
        (np.float32("nan"), ValueError, r"\[0, 1\)"),
        (1, ValueError, r"\[0, 1\)"),
        (-0.1, ValueError, r"\[0, 1\)"),
    ],
)
def test_non_numbers_nan_and_out_of_range_targets_are_refused(target, error, message):
    with pytest.raises(error, match=message):
        fcpts.sparsify(tiny_net(), images(), target, method="global-magnitude", progress=False)


@pytest.mark.parametrize("name", [m for m in METHODS if m != "str"])  # STR reaches what its search reaches
def test_a_layer_of_zeros_leaves_every_method_on_the_exact_target(name):
    """A layer that starts at zero (torchvision's ViT head) is already pruned; POT's L2Norm scores were 0/0 there,
    ranked last and kept, so its zeros came on top of the target's."""
    model = tiny_net()
    torch.nn.init.zeros_(model[7].weight)
    options = {"progress": False}
    if get_method(name).trains or get_method(name).family == "pot":
        options["iterations"] = 2
    _, report = fcpts.sparsify(model, images(), 0.5, method=name, **options)
    assert report.achieved_sparsity == 0.5
    assert next(r for r in report.per_layer if r["name"] == "7")["sparsity"] == 1.0


def test_report_summary_and_a_short_repr():
    _, report = fcpts.sparsify(tiny_net(), images(), 0.5, **QUICK)
    text = repr(report)
    assert len(text) <= 300 and "method='fcpts'" in text and "achieved=0.5000" in text
    summary = report.summary()
    lines = dict(line.split(None, 1) for line in summary.splitlines())
    assert lines["method"] == "fcpts" and lines["target"] == "50.00%"
    assert lines["achieved"] == "50.00% (412 of 824 weights zero)"
    low = min(r["sparsity"] for r in report.per_layer)
    assert lines["layers"].startswith(f"3 pruned, per-layer sparsity {low:.1%}")
    assert lines["steps"].startswith("2, final loss")
    assert len(report.summary(per_layer=True).splitlines()) == len(summary.splitlines()) + 3


def test_the_summary_names_a_layer_by_its_path_and_type():
    """tiny_net is an nn.Sequential: a bare `(7)` named nothing."""
    _, report = fcpts.sparsify(tiny_net(), images(), 0.5, method="uniform", progress=False)
    assert "  7 (Linear)" in report.summary(per_layer=True) and "  0 (Conv2d)" in report.summary(per_layer=True)
    assert "(7 (Linear))" in report.summary() or "(0 (Conv2d))" in report.summary()


def test_pot_reports_the_steps_it_ran():
    _, report = fcpts.sparsify(tiny_net(), images(), 0.5, method="pot-l2norm", iterations=3, progress=False)
    steps = sum(r["iterations"] for r in report.per_layer)
    assert steps > 0 and f"steps={steps}," in repr(report)
    assert dict(line.split(None, 1) for line in report.summary().splitlines())["steps"].startswith(f"{steps:,} over")


def test_the_registry_reads_as_its_names():
    assert repr(METHODS) == f"Registry({', '.join(METHODS)})" and "fcpts, " in repr(METHODS)


def test_sparsity_summary_is_public():
    model, report = fcpts.sparsify(tiny_net(), images(), 0.5, method="uniform", progress=False)
    sparsity, per_layer = fcpts.sparsity_summary(model)
    assert sparsity == report.achieved_sparsity == 0.5
    assert [r["name"] for r in per_layer] == ["0", "3", "7"]
    assert fcpts.sparsity_summary(model, exclude="7")[1][-1]["name"] == "3"


class ConvAttention(nn.Module):
    """A conv stem, torchvision-style attention (nn.MultiheadAttention: its q/k/v weights are one packed
    Parameter, not a Linear) over the pixels as tokens, and a Linear head."""

    def __init__(self, width=8):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.attn = nn.MultiheadAttention(width, 2, batch_first=True)
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        tokens = self.stem(x).flatten(2).transpose(1, 2)
        mixed, _ = self.attn(tokens, tokens, tokens, need_weights=False)
        return self.head(mixed.mean(1))


@pytest.mark.parametrize("method", ["fcpts", "global-magnitude"])
def test_weights_of_layers_no_method_prunes_are_named_not_silently_left_dense(method, caplog):
    model = ConvAttention()
    options = QUICK if method == "fcpts" else {"progress": False}
    with caplog.at_level("WARNING", logger="fcpts"):
        sparse, report = fcpts.sparsify(model, images(), 0.5, method=method, **options)
    assert (
        f"{method}: 192 weights in 1 tensor (MultiheadAttention.in_proj_weight) stay dense" in caplog.text
    )  # 3 x 8 x 8
    assert report.extra["unprunable_weights"] == {"attn.in_proj_weight": 192}
    assert bool((sparse.attn.in_proj_weight != 0).all())  # dense (FCPTS fine-tunes it like a bias)
    assert report.achieved_sparsity == 0.5  # over the Conv2d and the Linears (out_proj is one)
    assert [r["name"] for r in report.per_layer] == ["stem", "attn.out_proj", "head"]
    not_pruned = next(line for line in report.summary().splitlines() if line.startswith("not pruned"))
    assert "192 weights in 1 tensor of layers no method here prunes (e.g. attn.in_proj_weight)" in not_pruned


def test_a_model_whose_layers_all_are_unprunable_is_told_which_they_are():
    model = nn.Sequential(nn.Conv1d(3, 4, 3), nn.ReLU(), nn.ConvTranspose1d(4, 2, 3))
    with pytest.raises(
        NoPrunableLayersError, match=r"its 60 weights in 2 tensors \(Conv1d.weight, ConvTranspose1d.weight\) are not"
    ):
        fcpts.sparsify(model, torch.randn(4, 3, 8), 0.5, progress=False)


def test_a_model_of_conv2d_and_linear_layers_alone_reports_nothing_unprunable(caplog):
    with caplog.at_level("WARNING", logger="fcpts"):
        _, report = fcpts.sparsify(tiny_net(), images(), 0.5, method="uniform", progress=False)
    assert "unprunable_weights" not in report.extra and "stay dense" not in caplog.text
    assert "not pruned" not in report.summary()
