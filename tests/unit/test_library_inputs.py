"""Odd inputs a user's model may bring: a weight shared by two layers, outputs that are not one tensor, NaN weights;
and the edge cases of two methods (STR without iterations, FCPTS+'s block balance with a zero gradient)."""

import collections
import copy
import dataclasses
import re

import pytest
import torch
from torch import nn

import fcpts
from fcpts.core.calibration import Calibration
from fcpts.core.masks import prunable_layers, unparametrize_weights
from fcpts.methods import fcpts as fcpts_module
from fcpts.methods import get_method, thresholds
from tests.unit.tiny import tiny_net, untimed

QUICK = {"iterations": 2, "batch_size": 8, "progress": False}


def images(n=16, size=8, seed=0):
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


class TiedLayers(nn.Module):
    """`b` holds `a`'s weight Parameter itself (weight tying): 64 weights used by two layers."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.a, self.b, self.head = (
            nn.Conv2d(3, 8, 3, padding=1),
            nn.Linear(8, 8),
            nn.Linear(8, 8),
            nn.Linear(8, 4),
        )
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.head(self.b(torch.relu(self.a(self.conv(x).mean((2, 3))))))


@pytest.mark.parametrize("name", ["fcpts", "fcpts-plus", "obs", "global-magnitude", "erk", "pot-l2norm", "probmask"])
def test_a_shared_weight_is_counted_once_and_pruned_with_one_mask(name):
    unique = 216 + 64 + 32  # conv, the shared a/b weight, head
    options = get_method(name).make_options(QUICK, {"iterations": 5} if name.startswith("pot") else None)
    model, report = fcpts.sparsify(TiedLayers(), images(), 0.5, method=name, options=options)
    assert model.b.weight is model.a.weight  # still one tensor: both layers see the same mask
    zeros = sum(int((p == 0).sum()) for n, p in model.named_parameters() if n.endswith("weight"))
    assert zeros == round(0.5 * unique)  # named_parameters() lists a shared Parameter once
    assert report.achieved_sparsity == zeros / unique
    assert [r["name"] for r in report.per_layer] == ["conv", "a", "head"]
    assert report.per_layer[1]["shared_with"] == ["b"]


class SharedModule(TiedLayers):
    """`b` is `a` itself: the reference a shared weight (and bias) must train like."""

    def __init__(self):
        super().__init__()
        self.b = self.a


@pytest.mark.parametrize("name", ["fcpts", "str", "probmask"])
def test_a_shared_weight_trains_under_one_mask_like_a_shared_module(name):
    """While training, the second layer sees the masked weight too: the run equals one where the two layers are
    one module called twice (without the tie it would see the dense weight)."""
    options = get_method(name).make_options(QUICK, {"search_runs": 1} if name == "str" else None)
    tied = TiedLayers()
    tied.b.bias = tied.a.bias
    model, report = fcpts.sparsify(tied, images(), 0.5, method=name, options=options)
    ref, ref_report = fcpts.sparsify(SharedModule(), images(), 0.5, method=name, options=options)
    assert [row["loss"] for row in report.history] == [row["loss"] for row in ref_report.history]
    assert torch.equal(model.a.weight, ref.a.weight) and model.b.weight is model.a.weight


def test_a_shared_weight_stays_dense_when_either_of_its_layers_is_excluded():
    model, report = fcpts.sparsify(TiedLayers(), images(), 0.5, method="global-magnitude", exclude="b")
    assert [r["name"] for r in report.per_layer] == ["conv", "head"] and int((model.a.weight == 0).sum()) == 0


class DictOutput(nn.Module):
    def __init__(self, key="out"):
        super().__init__()
        self.net, self.key = tiny_net(), key

    def forward(self, x):
        y = self.net(x)
        return {self.key: y, "aux": y.detach() * 0}


Outputs = collections.namedtuple("Outputs", ["logits", "aux_logits"])


class NamedTupleOutput(DictOutput):
    def forward(self, x):
        y = self.net(x)
        return Outputs(y, -y) if self.training else y  # aux heads in train mode only, as GoogLeNet


class TupleOutput(DictOutput):
    def forward(self, x):
        return self.net(x), "extra"


@pytest.mark.parametrize("wrapper", [DictOutput, NamedTupleOutput, TupleOutput])
@pytest.mark.parametrize("name", ["fcpts", "fcpts-plus", "probmask"])
def test_models_returning_more_than_a_tensor_are_distilled_on_their_logits(wrapper, name):
    """The same run as on the bare network; the returned model answers as before (the adapter is removed)."""
    ref, ref_report = fcpts.sparsify(tiny_net(), images(), 0.5, method=name, **QUICK)
    model, report = fcpts.sparsify(wrapper(), images(), 0.5, method=name, **QUICK)
    for a, b in zip(ref.state_dict().values(), model.net.state_dict().values()):
        assert torch.equal(a, b)
    assert report.history[-1]["loss"] == ref_report.history[-1]["loss"]
    assert not isinstance(model.train()(images(2)), torch.Tensor)


def test_an_output_without_logits_is_refused_naming_output_fn_which_chooses_the_tensor():
    with pytest.raises(TypeError, match=r"keys \['scores', 'aux'\].*output_fn=lambda out"):
        fcpts.sparsify(DictOutput("scores"), images(), 0.5, **QUICK)
    ref, _ = fcpts.sparsify(tiny_net(), images(), 0.5, **QUICK)
    model, _ = fcpts.sparsify(DictOutput("scores"), images(), 0.5, output_fn=lambda out: out["scores"], **QUICK)
    for a, b in zip(ref.state_dict().values(), model.net.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(TypeError, match="output_fn must return the tensor"):
        fcpts.sparsify(DictOutput("scores"), images(), 0.5, output_fn=lambda out: out, **QUICK)


def test_torchvision_googlenet_with_aux_heads_in_train_mode():
    torchvision = pytest.importorskip("torchvision")  # the library's tests run without the [tasks] extra too
    model = torchvision.models.googlenet(weights=None, aux_logits=True, init_weights=False, num_classes=10)
    sparse, report = fcpts.sparsify(model, images(4, 32), 0.5, iterations=1, batch_size=2, progress=False)
    assert report.achieved_sparsity == pytest.approx(0.5, abs=1e-6) and len(report.history) == 1


@pytest.mark.parametrize("name", ["fcpts", "obs", "lamp", "pot-l2norm", "str"])
@pytest.mark.parametrize("where", ["3.weight", "1.running_var"])
def test_nan_or_inf_in_the_dense_model_is_refused_before_any_work_naming_the_tensor(name, where):
    model = tiny_net()
    model.state_dict()[where][0] = float("nan") if where.endswith("weight") else float("inf")
    with pytest.raises(ValueError, match=rf"'{where}' holds \d+ NaN/Inf"):
        fcpts.sparsify(model, images(), 0.5, method=name, options=get_method(name).make_options(QUICK))


@pytest.mark.parametrize("name", sorted(fcpts.METHODS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_model_is_refused_before_any_work_with_the_way_round(name, dtype):
    model = tiny_net().to(dtype)  # POT on a float16 model reported sparsity 0.0 over NaN weights, exit 0
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(TypeError, match=rf"'0.weight' is {dtype}: sparsify a float32 model"):
        fcpts.sparsify(model, images().to(dtype), 0.5, method=name, options=get_method(name).make_options(QUICK))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # untouched


def test_a_method_that_leaves_nan_weights_fails_whatever_sparsity_it_reports():
    magnitude = get_method("global-magnitude")

    def diverges(model, calibration, target, options):
        model, report = magnitude.run(model, calibration, target, options)
        with torch.no_grad():
            model[0].weight[0, 0, 0, 0] = float("nan")
        return model, report

    method = dataclasses.replace(magnitude, name="diverges", run=diverges)
    with pytest.raises(FloatingPointError, match=r"diverges left 1 NaN/Inf value\(s\) in '0.weight'"):
        method(tiny_net(), images(), 0.5)


@pytest.mark.parametrize("as_dataset", [False, True])
def test_raw_uint8_pixels_are_refused_naming_the_conversion(as_dataset):
    pixels = torch.randint(0, 256, (16, 3, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.TensorDataset(pixels, torch.zeros(16)) if as_dataset else pixels
    with pytest.raises(TypeError, match=r"torch.uint8 \(raw pixels\).*x.float\(\) / 255"):
        fcpts.sparsify(tiny_net(), data, 0.5, **QUICK)


@pytest.mark.parametrize("method", sorted(fcpts.METHODS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_inputs_of_another_dtype_than_the_weights_are_refused_naming_the_conversion(method, dtype):
    """Before any work, for every method: torch's own error would come from inside the first convolution."""
    with pytest.raises(TypeError, match=rf"inputs are {dtype} and the model's weights torch.float32: .*x.to"):
        fcpts.sparsify(tiny_net(), images().to(dtype), 0.5, method=method, progress=False)


@pytest.mark.parametrize("method", ["fcpts", "pot-l2norm", "obs"])
@pytest.mark.parametrize(
    "inputs", [images()[:, :, :, 0], images()[:, :1], images().long()], ids=["no-width", "1-channel", "int64"]
)
def test_inputs_the_model_cannot_take_are_refused_naming_their_shape_before_any_work(method, inputs):
    """torch's own error came from inside the method, about some layer's channels or scalar type."""
    model = tiny_net().train()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=rf"calibration tensor of shape {re.escape(str(tuple(inputs.shape)))} .*"
                       r"does not fit the model: .*fails in the model's forward"):  # fmt: skip
        fcpts.sparsify(model, inputs, 0.5, method=method, progress=False)
    assert model.training and all(m.training for m in model.modules())  # left as it was given
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_integer_inputs_are_left_to_a_model_that_takes_them():
    """Token ids into an embedding: integers are a model's own inputs, not a dtype mistake."""
    model = nn.Sequential(nn.Embedding(10, 8), nn.Flatten(), nn.Linear(32, 4))
    ids = torch.randint(0, 10, (16, 4), generator=torch.Generator().manual_seed(0))
    _, report = fcpts.sparsify(model, ids, 0.5, method="global-magnitude", progress=False)
    assert report.achieved_sparsity == 0.5


def test_a_numpy_array_of_inputs_runs_as_its_tensor():
    """An array was read as a Dataset of arrays, and its first batch refused as items that are not tensors."""
    model, tensor_model = tiny_net(), tiny_net()
    _, report = fcpts.sparsify(model, images().numpy(), 0.5, **QUICK)
    _, tensor_report = fcpts.sparsify(tensor_model, images(), 0.5, **QUICK)
    assert untimed(report.history) == untimed(tensor_report.history)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), tensor_model.state_dict().values()))
    with pytest.raises(TypeError, match=r"inputs are torch.float64 .*array.astype\(numpy.float32\)"):
        fcpts.sparsify(tiny_net(), images().double().numpy(), 0.5, **QUICK)


def zeros_in_layers(model: nn.Module, count: int) -> nn.Module:
    """The `count` smallest weights of all layers set to zero, as an already pruned model has."""
    weights = [m.weight for m in prunable_layers(model).values()]
    cut = torch.cat([w.detach().abs().flatten() for w in weights]).sort().values[count - 1]
    with torch.no_grad():
        for w in weights:
            w[w.abs() <= cut] = 0
    return model


@pytest.mark.parametrize("name", sorted(fcpts.METHODS))
def test_a_model_holding_more_zeros_than_the_target_is_refused_before_any_work(name):
    """Masks only add zeros: FCPTS returned 49.94% for a 30% target, blaming its control loss; magnitude
    methods returned the zeros there were."""
    total = sum(m.weight.numel() for m in prunable_layers(tiny_net()).values())
    model = zeros_in_layers(tiny_net(), total // 2)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=rf"already hold {total // 2} zero weights of {total} .* at least 50.00%"):
        fcpts.sparsify(model, images(), 0.3, method=name, options=get_method(name).make_options(QUICK))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("name", ["fcpts", "global-magnitude", "obs", "pot-l2norm"])
def test_a_model_holding_as_many_zeros_as_the_target_asks_runs_to_it(name):
    total = sum(m.weight.numel() for m in prunable_layers(tiny_net()).values())
    model = zeros_in_layers(tiny_net(), round(0.5 * total))
    _, report = fcpts.sparsify(model, images(), 0.5, method=name, options=get_method(name).make_options(QUICK))
    assert report.achieved_sparsity == 0.5


def test_a_dataset_of_dicts_is_refused_naming_the_field_to_pass():
    class Fields(torch.utils.data.Dataset):  # as Hugging Face's datasets give them
        def __len__(self):
            return 16

        def __getitem__(self, i):
            return {"labels": torch.tensor(i % 4), "pixel_values": images()[i]}

    with pytest.raises(TypeError, match=r"gives fields \['labels', 'pixel_values'\]: .*\[item\['pixel_values'\] for"):
        fcpts.sparsify(tiny_net(), Fields(), 0.5, **QUICK)
    _, report = fcpts.sparsify(tiny_net(), [item["pixel_values"] for item in Fields()], 0.5, **QUICK)
    assert report.achieved_sparsity == 0.5


def test_str_without_iterations_is_a_clear_error():
    with pytest.raises(ValueError, match="STR reaches sparsity only by training its thresholds: iterations must be"):
        fcpts.sparsify(tiny_net(), images(), 0.5, method="str", iterations=0, progress=False)


def _probe(student, teacher):
    options = fcpts_module.FCPTSOptions(block_names=["0"])
    reconstruction = fcpts_module._Reconstruction(student, teacher, options, fcpts_module.Variant())
    batches = fcpts_module.StepBatches(Calibration(torch.randn(16, 5), 16, seed=0), torch.device("cpu"))
    measured = reconstruction.balance(student, teacher, batches, list(student.parameters()), balance=1.0, batches=1)
    return reconstruction.weight, measured


def test_block_balance_with_a_zero_gradient_uses_fcpts_weight_instead_of_stopping():
    """A zero gradient on either side makes the ratio meaningless, not the student equal to the teacher."""
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    student = copy.deepcopy(teacher)
    with torch.no_grad():
        student[2].weight[0] = 0  # the block "0" still equals the teacher's; the output does not
    weight, measured = _probe(student, teacher)
    assert measured["kl_grad_norm"] > 0 and measured["blocks_grad_norm"] == 0
    assert weight == fcpts_module.UNBALANCED_WEIGHT == 1.0 and measured["unbalanced"] == "the blocks' gradient is zero"
    weight, measured = _probe(copy.deepcopy(teacher), teacher)  # nothing pruned (the KL's is zero to rounding)
    assert weight == 1.0 and measured["blocks_grad_norm"] == 0 and "unbalanced" in measured


def test_block_balance_with_a_nan_gradient_is_an_error_that_says_so():
    teacher = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    student = copy.deepcopy(teacher)
    with torch.no_grad():
        student[2].bias[0] = float("nan")
    with pytest.raises(FloatingPointError, match="non-finite gradient"):
        _probe(student, teacher)


def test_prunable_layers_names_each_shared_weight_once_also_under_a_parametrization():
    model = TiedLayers()
    layers = prunable_layers(model)
    assert list(layers) == ["conv", "a", "head"] and layers.sharing == {"a": [model.b]}
    thresholds.attach(layers, {n: 0.5 for n in layers}, threshold_grad=False)  # weights computed on each access
    assert list(prunable_layers(model)) == ["conv", "a", "head"]
    unparametrize_weights(layers)
    assert model.b.weight is model.a.weight
