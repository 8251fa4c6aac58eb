"""Every registered method on each device (the CPU always, a GPU where there is one): a tiny model, a tiny
budget, the exact target, and the model's parameters, buffers and outputs on the device asked for. The
methods come from the registry, so a new one is covered without touching this file."""

import pytest
import torch
from torch import nn

import fcpts
from fcpts.core.masks import sparsity_summary
from fcpts.methods import METHODS
from tests.conftest import DEVICES
from tests.unit.tiny import tiny_net

BUDGET = {"iterations": 2, "batch_size": 8, "progress": False, "seed": 0}  # what a grid grants every method
OWN_OPTIONS = {  # each method's own budget knobs, cut to a smoke test
    "pot-l2norm": {"iterations": 2},
    "pot-erk": {"iterations": 2},
    "str": {"search_runs": 1},
    "obs": {"levels": (0.5, 0.9)},
}
CANNOT_AIM = {"str"}  # reports the sparsity it reached (docs/design.md)
TARGET = 0.75


net = tiny_net


def images(n: int = 16) -> torch.Tensor:
    return torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def assert_on(model: nn.Module, device: str) -> None:
    where = {t.device.type for t in [*model.parameters(), *model.buffers()]}
    assert where == {device}, f"parameters/buffers on {where}, expected {device}"
    with torch.no_grad():
        out = model(images(2).to(device))
    assert out.device.type == device and torch.isfinite(out).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_runs_on_the_device(name, device):
    method = METHODS[name]
    options = method.make_options(BUDGET, {**OWN_OPTIONS.get(name, {}), "device": device})
    model, report = method(net().to(device), images(), TARGET, options)  # the grid hands methods a placed model
    assert_on(model, device)
    achieved, per_layer = sparsity_summary(model)
    assert report.achieved_sparsity == achieved
    if name not in CANNOT_AIM:
        n = sum(r["numel"] for r in per_layer)
        assert round(achieved * n) == round(TARGET * n)


@pytest.mark.parametrize("device", DEVICES)
def test_fcpts_moves_a_host_model_to_the_device_option(device):
    model, _ = fcpts.sparsify(net(), images(), 0.5, iterations=2, batch_size=8, progress=False, device=device)
    assert_on(model, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["fcpts", "probmask"])
def test_bf16_training_keeps_fp32_parameters_and_the_exact_target(name, device):
    method = METHODS[name]
    options = method.make_options(BUDGET, {"device": device, "amp": "bf16"})
    model, report = method(net().to(device), images(), 0.5, options)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert_on(model, device)
    n = sum(r["numel"] for r in report.per_layer)
    assert round(report.achieved_sparsity * n) == round(0.5 * n)
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in report.history)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_asking_for_cuda_without_it_is_a_clear_error():
    with pytest.raises(ValueError, match="CUDA is not available"):
        fcpts.sparsify(net(), images(), 0.5, iterations=1, progress=False, device="cuda")


@pytest.mark.cuda
def test_batches_fetched_ahead_on_their_own_stream_equal_those_fetched_in_turn():
    """The loop copies the next batch on a stream of its own while the current step's kernels run: each step must
    still see exactly its own batch, whole, however long the kernels before it run."""
    from fcpts.core.calibration import Calibration
    from fcpts.core.loop import Prefetched, StepBatches

    device = torch.device("cuda")
    batches = StepBatches(Calibration(images(64), batch_size=16, seed=0), device, channels_last=True)
    fetch = Prefetched(batches, ahead=True, device=device)
    assert fetch.stream is not None
    busy = torch.randn(2048, 2048, device=device)
    seen = []
    for step in range(8):
        x = fetch(step)
        for _ in range(50):  # keeps the step's stream busy while the next batch is copied on the other
            busy = torch.tanh(busy @ busy)
        seen.append(x + busy[0, 0] * 0)  # used on the step's stream after its work
        fetch.fetch_after(step, 8)
    torch.cuda.synchronize()
    assert all(x.is_contiguous(memory_format=torch.channels_last) for x in seen)
    assert all(torch.equal(x, batches(step)) for step, x in enumerate(seen))


@pytest.mark.cuda
def test_batches_made_by_workers_reach_the_gpu_pinned_and_the_run_equals_one_without_them():
    """On a GPU the host's part of each batch is made by worker processes by default: their batches come pinned
    (so the copy does not make the host wait) and the run's result is the one made with batches made in turn (the
    same zeros; weights to the GPU's own run-to-run rounding: the batches' equality is the CPU test's)."""
    from torch.utils.data import TensorDataset

    from fcpts.core.calibration import Calibration
    from fcpts.core.loop import StepBatches

    data = TensorDataset(images(64))
    batches = StepBatches(Calibration(data, batch_size=16, seed=0), torch.device("cuda"))
    with batches.from_workers(None, start=0, stop=4):
        assert batches.workers >= 1
        host = [batches.host(step) for step in range(4)]
    assert all(x.is_pinned() for x in host)
    runs = []
    for workers in (None, 0):
        model, report = fcpts.sparsify(
            net(), data, TARGET, device="cuda", calibration_workers=workers, cuda_graphs=False, **BUDGET
        )
        runs.append((model.state_dict(), report.extra.get("batch_workers")))
    (made, by), (here, none) = runs
    assert by >= 1 and none is None
    assert all(torch.equal(a == 0, b == 0) for a, b in zip(made.values(), here.values()))
    assert all(torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-6) for a, b in zip(made.values(), here.values()))


@pytest.mark.cuda
def test_masks_made_together_inside_a_replayed_step_equal_masks_made_layer_by_layer(monkeypatch):
    """On a GPU FCPTS's steps replay from a CUDA graph that holds the masks of all layers made at once (one flat
    tensor, a few kernels): the run equals one whose layers mask themselves, each eager (the same zeros; weights to
    the GPU's own rounding, since replay and eager kernels may differ)."""
    from fcpts.methods import thresholds

    x = images(32)
    together, _ = fcpts.sparsify(net(), x, TARGET, device="cuda", **BUDGET | {"iterations": 6})
    monkeypatch.setattr(thresholds.MaskedTogether, "applies", staticmethod(lambda layers, params: False))
    alone, _ = fcpts.sparsify(net(), x, TARGET, device="cuda", cuda_graphs=False, **BUDGET | {"iterations": 6})
    a, b = together.state_dict(), alone.state_dict()
    assert all(torch.equal(a[k] == 0, b[k] == 0) for k in a)
    assert all(torch.allclose(a[k].float(), b[k].float(), rtol=1e-4, atol=1e-5) for k in a)
