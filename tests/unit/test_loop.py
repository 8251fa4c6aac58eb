"""The shared distillation loop: losses read back every `log_every` steps without changing the run, NaN/Inf
named by step, no checkpoint holding an unchecked NaN, options that leave a run's identity alone."""

import copy
import math

import pytest
import torch
from torch import nn

import fcpts
from fcpts.core.calibration import Calibration, to_device
from fcpts.core.checkpoint import Checkpoint
from fcpts.core.loop import StepBatches, frozen_teacher, run_identity, train_loop, warmup_cosine
from fcpts.core.options import TrainingOptions
from fcpts.methods.fcpts import BlocksMSE, FCPTSOptions, sole_tensors
from tests.unit.tiny import untimed


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def images(n: int = 16) -> torch.Tensor:
    return torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def test_log_interval_keeps_every_step_and_changes_nothing():
    runs = {}
    for every in (1, 3, 50):
        options = dict(iterations=7, batch_size=4, progress=False, log_every=every)
        model, report = fcpts.sparsify(net(), images(), 0.5, **options)
        runs[every] = (model.state_dict(), report.history)
    for every in (3, 50):
        assert untimed(runs[every][1]) == untimed(runs[1][1])
        assert all(torch.equal(a, b) for a, b in zip(runs[every][0].values(), runs[1][0].values()))
    assert [row["step"] for row in runs[3][1]] == list(range(7))
    assert {"loss", "rec", "control", "sparsity", "lr", "step_s"} <= set(runs[3][1][0])


def nan_at(step_with_nan: int):
    def loss_fn(y_s, y_t, step):
        loss = (y_s - y_t).pow(2).mean() + 1.0
        if step == step_with_nan:
            loss = loss * math.nan
        return loss, {"rec": loss.detach()}

    return loss_fn


def loop(tmp_path, loss_fn, log_every: int, every_steps: int | None = None):
    model = net()
    teacher = frozen_teacher(model, "train")
    options = TrainingOptions(iterations=8, batch_size=4, progress=False, log_every=log_every)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(1, 8))
    ckpt = Checkpoint(tmp_path / "run.pt", {"run": 1}, every_s=1e9, every_steps=every_steps)
    batches = StepBatches(Calibration(images(), 4, 0), torch.device("cpu"))
    return train_loop(model, teacher, batches, options, [sched], loss_fn, ckpt, desc="test")


def test_a_nan_mid_run_names_its_step_and_the_read_out_interval(tmp_path):
    with pytest.raises(FloatingPointError, match=r"the loss is nan at step 4 .*steps 3-5.*lower the learning rate"):
        loop(tmp_path, nan_at(4), log_every=3)


def test_no_checkpoint_is_saved_past_an_unchecked_nan(tmp_path):
    with pytest.raises(FloatingPointError, match="step 4"):
        loop(tmp_path, nan_at(4), log_every=50, every_steps=2)
    state = torch.load(tmp_path / "run.pt", weights_only=True)
    assert state["step"] == 4  # saved after steps 0-3; the save after step 5 found the NaN first
    assert all(torch.isfinite(v).all() for v in state["model"].values())


def test_log_every_and_unset_amp_leave_the_identity_of_a_run_alone():
    model, calib = net(), Calibration(images(), 4, 0)
    base = run_identity(0.5, FCPTSOptions(), calib, model)
    assert "amp" not in base["options"] and "log_every" not in base["options"]
    assert run_identity(0.5, FCPTSOptions(log_every=7), calib, model) == base
    assert run_identity(0.5, FCPTSOptions(amp="bf16"), calib, model)["options"]["amp"] == "bf16"


@pytest.mark.parametrize("bad", [{"amp": "fp16"}, {"amp": True}, {"log_every": 0}])
def test_bad_training_options_fail_before_any_work(bad):
    with pytest.raises(ValueError, match="amp|log_every"):
        FCPTSOptions(**bad).validate()


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        fcpts.sparsify(net(), images(), 0.5, iterations=1, progress=False, device="gpu")


def block_mse(student, teacher, reuse_teacher=False):
    """One block's MSE as FCPTS takes it (`reuse_teacher`: the difference written over the teacher's tensor)."""
    return BlocksMSE()({"block": student}, {"block": teacher}, {"block"} if reuse_teacher else set())


def test_block_mse_has_mse_losss_value_and_gradient():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(4, 8, 5, 5, generator=g).contiguous(memory_format=torch.channels_last).requires_grad_()
    t = torch.randn(4, 8, 5, 5, generator=g).contiguous(memory_format=torch.channels_last)
    ours = block_mse(s, t)
    (grad,) = torch.autograd.grad(ours, s)
    reference = nn.functional.mse_loss(s, t)
    (expected,) = torch.autograd.grad(reference, s)
    assert ours.item() == pytest.approx(reference.item(), rel=1e-5)
    assert torch.equal(grad, expected)
    assert grad.is_contiguous(memory_format=torch.channels_last)


def test_block_mse_over_the_teachers_tensor_gives_the_same_bits_in_its_memory():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(4, 8, 5, 5, generator=g).contiguous(memory_format=torch.channels_last).requires_grad_()
    t = torch.randn(4, 8, 5, 5, generator=g).contiguous(memory_format=torch.channels_last)
    kept = t.clone()
    fresh = block_mse(s, kept)
    (fresh_grad,) = torch.autograd.grad(fresh, s)
    assert torch.equal(kept, t), "by default the teacher's tensor is left alone"
    reused = block_mse(s, t, reuse_teacher=True)
    (grad,) = torch.autograd.grad(reused, s)
    assert reused.item() == fresh.item() and torch.equal(grad, fresh_grad)
    assert grad.data_ptr() == t.data_ptr(), "difference and gradient written over the teacher's tensor"
    half = kept.bfloat16()
    block_mse(s, half, reuse_teacher=True)
    assert torch.equal(half, kept.bfloat16()), "a bfloat16 teacher cannot hold the float32 difference: left alone"


def test_a_second_backward_through_a_block_mse_fails_instead_of_reading_its_gradient():
    s = torch.randn(2, 3, 4, 4, requires_grad=True)
    loss = block_mse(s, torch.randn(2, 3, 4, 4))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_only_block_outputs_nothing_else_reads_may_be_overwritten():
    shared = torch.randn(4, 3, 4, 4)
    alone, output = torch.randn(2, 3, 4, 4), torch.randn(2, 10)
    blocks = {
        "alone": alone,
        "channels-last": torch.randn(2, 3, 4, 4).contiguous(memory_format=torch.channels_last),
        "tapped twice": shared,
        "its alias": shared,
        "half of another": (halves := torch.randn(4, 3, 4, 4))[:2],
        "other half": halves[2:],
        "the output": output,
        "strided": torch.randn(2, 3, 4, 8)[..., ::2],
    }
    assert sole_tensors(blocks, output) == {"alone", "channels-last"}


class _Wrapper(nn.Module):
    """A block that returns its inner block's output: one tensor tapped under two names."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Conv2d(3, 4, 3))

    def forward(self, x):
        return self.inner(x)


def test_a_teacher_output_tapped_twice_or_returned_is_never_overwritten(monkeypatch):
    from fcpts.methods import fcpts as fcpts_method

    def run() -> dict:
        torch.manual_seed(0)
        model = nn.Sequential(_Wrapper(), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
        sparse, _ = fcpts.sparsify(model, images(), 0.5, iterations=3, batch_size=8, progress=False)
        return sparse.state_dict()

    guarded = run()
    monkeypatch.setattr(fcpts_method, "sole_tensors", lambda blocks, output: set())
    never = run()
    assert all(torch.equal(guarded[k], never[k]) for k in never)
    monkeypatch.setattr(fcpts_method, "sole_tensors", lambda blocks, output: set(blocks))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run()  # unguarded, "0.inner.0"'s MSE writes over the difference "0"'s saved


def test_fcpts_overwrites_every_teacher_block_output_of_a_cifar_resnet(monkeypatch):
    from fcpts.methods import fcpts as fcpts_method
    from tasks.grid.cifar_models import cifar_resnet

    decided: list[tuple[set, set]] = []
    real = fcpts_method.sole_tensors

    def record(blocks, output):
        sole = real(blocks, output)
        decided.append((set(blocks), sole))
        return sole

    monkeypatch.setattr(fcpts_method, "sole_tensors", record)
    fcpts.sparsify(cifar_resnet("resnet20"), torch.randn(8, 3, 8, 8), 0.9, iterations=2, batch_size=8, progress=False)
    assert len(decided) == 2 and all(len(names) == 9 and sole == names for names, sole in decided)


def test_block_output_gradients_are_accumulated_in_place():
    """Each CIFAR ResNet block output gets two gradients, its block MSE's (first) and the rest of the network's.
    Autograd adds the second into the first in place only while the first's storage has no other user, else
    every sum takes a fresh block-sized buffer (the overwritten teacher outputs had kept a second user, a
    storage object made by reading their address)."""
    from torch.profiler import ProfilerActivity, profile

    from tasks.grid.cifar_models import cifar_resnet

    x = torch.randn(8, 3, 8, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fcpts.sparsify(cifar_resnet("resnet20"), x, 0.9, iterations=1, batch_size=8, progress=False)
    sums = [
        e.name for e in prof.events()
        if e.name in ("aten::add", "aten::add_") and e.cpu_parent is not None
        and e.cpu_parent.name.startswith("autograd::engine::evaluate_function")
        and len(e.input_shapes[0]) == 4 and e.input_shapes[0][0] == len(x)
    ]  # fmt: skip
    assert len(sums) >= 9 and set(sums) == {"aten::add_"}, sums


def teacher_block_outputs(monkeypatch) -> dict:
    """{block name: a weak reference to the teacher's latest output there}, kept by wrapping FCPTS's block taps."""
    import weakref

    from fcpts.methods import fcpts as fcpts_method

    held: dict = {}
    real_hook = fcpts_method._Taps._hook

    def hook(self, name):
        inner = real_hook(self, name)

        def keep_track(module, inp, out):
            if not torch.is_grad_enabled():  # the teacher's forward
                held[name] = weakref.ref(out)
            return inner(module, inp, out)

        return keep_track

    monkeypatch.setattr(fcpts_method._Taps, "_hook", hook)
    return held


@pytest.mark.parametrize("method, options", [("fcpts", {}), ("fcpts-plus", {"block_weight": 8.0})])
def test_the_teachers_block_outputs_are_freed_before_the_backward(method, options, monkeypatch):
    """The block MSE reads the teacher's block outputs once; held through the student's backward they would add a
    set of block outputs to a step's memory (a ViT-B's twelve at batch 64: 465 MB). FCPTS+ with a fixed block
    weight: its 'auto' weight's probe computes its own gradients with the outputs held, before the loop."""
    held, alive_in_backward = teacher_block_outputs(monkeypatch), []
    model = net()  # blocks "0" (a conv) and "3" (the head, whose output, the logits, the KL's teacher term keeps)
    model[0].weight.register_hook(lambda g: alive_in_backward.append(held["0"]() is not None))
    fcpts.get_method(method)(model, images(), 0.5, iterations=3, batch_size=4, progress=False, **options)
    assert alive_in_backward == [False] * 3


def test_each_sole_teacher_block_output_holds_its_difference(monkeypatch):
    """The differences of the teacher's block outputs nothing else reads are written over them, so a step never
    holds the teacher's block outputs and the MSE's differences (one block output each) at once; the logits, which
    the KL's teacher term keeps, get a buffer of their own."""
    from fcpts.methods import fcpts as fcpts_method

    seen = []
    real = fcpts_method.block_differences

    def differences(students, teachers, sole, together):
        addresses = [t.data_ptr() for t in teachers]
        diffs = real(students, teachers, sole, together)
        seen.append([(d.data_ptr() == a, reuse) for d, a, reuse in zip(diffs, addresses, sole)])
        return diffs

    monkeypatch.setattr(fcpts_method, "block_differences", differences)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1))
    model.append(nn.Sequential(nn.Flatten(), nn.Linear(4 * 8 * 8, 3)))
    fcpts.sparsify(model, images(), 0.5, iterations=2, batch_size=4, progress=False)
    # blocks 0, 1, 2 (overwritten) and the head's Linear "3.1" (the logits: a buffer of its own); each step
    assert seen == [[(True, True)] * 3 + [(False, False)]] * 2


def test_host_batches_stay_put_on_the_cpu():
    x = images(2)
    assert to_device(x, torch.device("cpu")) is x


def test_channels_last_feeds_nhwc_and_returns_an_nchw_model():
    layouts = []
    model = net()
    model[0].register_forward_pre_hook(
        lambda _m, inp: layouts.append(inp[0].is_contiguous(memory_format=torch.channels_last))
    )
    sparse, _ = fcpts.sparsify(model, images(), 0.5, iterations=2, batch_size=4, progress=False, channels_last=True)
    assert layouts and all(layouts)  # teacher and student, every step
    assert sparse[0].weight.is_contiguous()


@pytest.mark.parametrize("method", ["fcpts", "str", "probmask"])
def test_fetching_the_next_batch_ahead_changes_nothing(method, monkeypatch):
    from fcpts.core import loop

    real_init, real_after = loop.Prefetched.__init__, loop.Prefetched.fetch_after

    def run(forced: bool):
        fetched = []

        def init(self, batches, ahead, device=None):  # on this CPU the loop does not fetch ahead unless forced to
            self.inside = False
            real_init(self, lambda step: fetched.append((step, self.inside)) or batches(step), forced, device)

        def after(self, step, iterations):  # marks the fetches made ahead, after a step's work
            self.inside = True
            real_after(self, step, iterations)
            self.inside = False

        monkeypatch.setattr(loop.Prefetched, "__init__", init)
        monkeypatch.setattr(loop.Prefetched, "fetch_after", after)
        model, report = fcpts.get_method(method)(net(), images(), 0.5, iterations=5, batch_size=4, progress=False)
        return model.state_dict(), untimed(report.history), fetched

    (plain, plain_history, in_turn), (ahead, ahead_history, early) = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(plain.values(), ahead.values())) and plain_history == ahead_history
    loops = len(in_turn) // 5  # STR's trials run the loop several times
    assert in_turn == [(k, False) for k in range(5)] * loops  # each batch at its own step
    assert early == ([(0, False)] + [(k, True) for k in range(1, 5)]) * loops  # the rest after the step before


def test_a_batch_that_fails_ahead_fails_at_its_own_step():
    from fcpts.core.loop import Prefetched

    def batches(step):
        if step == 2:
            raise ValueError("calibration images (dataset indices 7) contain NaN or Inf values")
        return torch.full((1,), float(step))

    fetch = Prefetched(batches, ahead=True)
    assert fetch(1).item() == 1.0
    fetch.fetch_after(1, iterations=4)  # step 2's batch fails here: dropped, not raised mid-step 1
    with pytest.raises(ValueError, match="dataset indices 7"):
        fetch(2)
    fetch.fetch_after(3, iterations=4)  # the last step: nothing ahead
    assert fetch.next is None and fetch(3).item() == 3.0


class GradientsSeenInForward(nn.Module):
    """Records, at each training forward, whether any of the model's parameters still holds a gradient."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.seen = model, []

    def forward(self, x):
        if torch.is_grad_enabled():  # the student's forward, not the teacher's
            self.seen.append(any(p.grad is not None for p in self.model.parameters()))
        return self.model(x)


@pytest.mark.parametrize("method", ["fcpts", "probmask"])
def test_last_steps_gradients_are_let_go_before_the_forward(method):
    """Held through the next forward they would add 4 bytes a parameter to its peak (ProbMask's scores' too), where
    the forward's activations and masked weights pile up (docs/memory.md)."""
    model = GradientsSeenInForward(net())
    fcpts.get_method(method)(model, images(), 0.5, iterations=3, batch_size=4, progress=False)
    assert model.seen == [False] * 3


def test_a_training_mode_teacher_gives_the_same_outputs_and_updates_no_statistics():
    """Its BatchNorm normalises with batch statistics as before, bit for bit, without updating running statistics
    or counters that nothing reads (an operator per BN layer a step)."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    teacher, tracking = frozen_teacher(model, "train"), copy.deepcopy(model).train()
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    x = images()
    with torch.no_grad():
        assert torch.equal(teacher(x), tracking(x))
    assert all(torch.equal(before[k], v) for k, v in teacher.state_dict().items())
    assert int(tracking[1].num_batches_tracked) == 1
