"""FCPTS's steps replayed from a CUDA graph (fcpts/core/step_graph.py).

On a CPU the loop's side of it is checked with a stand-in capture: its replay runs the recorded step again (the
step it was recorded at, on the graph's input tensor) and writes the results into the tensors the capture
returned, as a graph's replay rewrites its outputs. On a GPU the real graphs are checked against eager steps."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import fcpts
from fcpts.core import step_graph
from fcpts.core.masks import prunable_layers
from tasks.grid.cifar_models import cifar_resnet
from tests.unit.tiny import tiny_net, untimed

ITERATIONS = 9


def images(n: int = 16, size: int = 8) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(0))


def stand_in_capture(replayed: list[int]):
    """A capture that records nothing and whose replay reruns the step into the first replay's tensors."""

    def capture(work, step, static_x):
        out: tuple[torch.Tensor, dict] = (torch.zeros(()), {})

        def replay() -> None:
            loss, logs = work(step, static_x)
            with torch.no_grad():
                out[0].copy_(loss)
                for k, v in logs.items():
                    out[1].setdefault(k, torch.zeros_like(v)).copy_(v)
            replayed.append(step)

        return replay, out

    return capture


class CaptureGuard(TorchDispatchMode):
    """Notes every operator a CUDA graph cannot record: a read-back to the host (on a GPU, a sync a capture
    forbids), an output whose shape depends on the data, a tensor built from host data (on a GPU, a copy from
    pageable memory), a draw from an explicit generator (a capture follows the default CUDA generator, others
    only once registered with it). Seen from a CPU run, so `.tolist()` and `.cpu()` (no dispatch on a CPU) go
    unnoticed."""

    HOST_READS = {"aten._local_scalar_dense", "aten.equal", "aten.is_nonzero"}
    DATA_SHAPED = {"aten.nonzero", "aten.masked_select", "aten._unique2", "aten.unique_dim", "aten.unique_consecutive"}
    HOST_DATA = {"aten.lift_fresh"}

    def __init__(self):
        super().__init__()
        self.ran: list[str] = []
        self.uncapturable: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func.overloadpacket)
        self.ran.append(name)
        if why := self._why(name, args, kwargs):
            self.uncapturable.append(f"{name}: {why}")
        return func(*args, **kwargs)

    def _why(self, name: str, args, kwargs) -> str | None:
        if name in self.HOST_READS:
            return "reads a value back to the host"
        if name in self.DATA_SHAPED:
            return "its shape depends on the data"
        if name in ("aten.index", "aten.index_put", "aten.index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1]
        ):
            return "a boolean-mask index (its shape depends on the data)"
        if name in self.HOST_DATA:
            return "a tensor built from host data"
        if isinstance(kwargs.get("generator"), torch.Generator):
            return "a draw from an explicit generator"
        return None


def guarded_capture(guard: CaptureGuard):
    """Runs the step once under `guard` where a capture would record it; its replays as `stand_in_capture`'s."""

    def capture(work, step, static_x):
        with guard:
            work(step, static_x)
        return stand_in_capture([])(work, step, static_x)

    return capture


def forced_on_this_cpu(monkeypatch, capture) -> None:
    monkeypatch.setattr(step_graph, "can_capture", lambda device: True)
    monkeypatch.setattr(step_graph, "side_stream", contextlib.nullcontext)
    monkeypatch.setattr(step_graph, "capture", capture)


def run(method: str = "fcpts", **options):
    model, report = fcpts.get_method(method)(
        tiny_net(), images(), 0.75, iterations=ITERATIONS, batch_size=8, progress=False, log_every=1, **options
    )
    return model.state_dict(), untimed(report.history), report.extra


@pytest.mark.parametrize("method", ["fcpts", "fcpts-plus"])
def test_replayed_steps_give_the_eager_run_bit_for_bit(method, monkeypatch):
    eager, eager_history, eager_extra = run(method)
    replayed: list[int] = []
    forced_on_this_cpu(monkeypatch, stand_in_capture(replayed))
    graphed, graphed_history, extra = run(method)
    assert all(torch.equal(eager[k], graphed[k]) for k in eager)
    assert graphed_history == eager_history  # every step's logged losses, though a replay rewrites one tensor
    first = step_graph.WARMUP
    assert replayed == [first] * (ITERATIONS - first)  # recorded at its first step, replayed at every later one
    assert extra["steps_on"] == "cuda-graph" and extra["replayed_from_step"] == first
    assert "steps_on" not in eager_extra  # where no graph was asked for (a CPU), the report is as before


def test_a_capture_that_fails_leaves_the_steps_eager_and_says_why(monkeypatch):
    eager, eager_history, _ = run()

    def failing(work, step, static_x):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    forced_on_this_cpu(monkeypatch, failing)
    graphed, history, extra = run()
    assert all(torch.equal(eager[k], graphed[k]) for k in eager) and history == eager_history
    assert extra["steps_on"] == "eager (CUDA graph capture failed: operation not permitted when stream is capturing)"
    assert extra["replayed_from_step"] is None


def test_cuda_graphs_off_never_captures(monkeypatch):
    def never(work, step, static_x):
        raise AssertionError("captured with cuda_graphs=False")

    forced_on_this_cpu(monkeypatch, never)
    _, _, extra = run(cuda_graphs=False)
    assert "steps_on" not in extra


def test_a_run_no_longer_than_the_warm_up_is_all_eager(monkeypatch):
    replayed: list[int] = []
    forced_on_this_cpu(monkeypatch, stand_in_capture(replayed))
    _, report = fcpts.sparsify(tiny_net(), images(), 0.75, iterations=step_graph.WARMUP, batch_size=8, progress=False)
    assert replayed == [] and report.extra["steps_on"] == "eager"


@pytest.mark.cuda
@pytest.mark.parametrize("amp", [None, "bf16"], ids=["fp32", "bf16"])
def test_cuda_graph_steps_follow_the_eager_steps(amp):
    """On a GPU: CIFAR ResNet-20, 20 steps each way. Eager GPU steps are not bit-reproducible themselves
    (cuDNN's backward sums in varying order), so the losses are compared within 1e-3 (1e-2 in bfloat16, whose
    rounding magnifies that) and the masks by overlap."""
    x = images(64, 32)
    runs = {}
    for graphs in (False, True):
        torch.manual_seed(0)
        model, report = fcpts.sparsify(
            cifar_resnet("resnet20"), x, 0.9, iterations=20, batch_size=32, progress=False, log_every=1,
            device="cuda", amp=amp, cuda_graphs=graphs,
        )  # fmt: skip
        runs[graphs] = model, report
    (eager, eager_report), (graphed, graphed_report) = runs[False], runs[True]
    assert graphed_report.extra["steps_on"] == "cuda-graph", graphed_report.extra["steps_on"]
    assert "steps_on" not in eager_report.extra  # no graph asked for
    assert graphed_report.achieved_sparsity == eager_report.achieved_sparsity
    for a, b in zip(eager_report.history, graphed_report.history):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-2 if amp else 1e-3), (a["step"], a["loss"], b["loss"])
    same = sum(int((a.weight != 0).eq(b.weight != 0).sum()) for a, b in zip(
        prunable_layers(eager).values(), prunable_layers(graphed).values()))  # fmt: skip
    total = sum(m.weight.numel() for m in prunable_layers(eager).values())
    assert same / total > 0.999


def test_a_batch_unlike_the_recorded_one_runs_eagerly(monkeypatch):
    replayed: list[int] = []
    forced_on_this_cpu(monkeypatch, stand_in_capture(replayed))
    ran: list[tuple[int, tuple[int, ...]]] = []

    def work(step, x):
        ran.append((step, tuple(x.shape)))
        return x.sum(), {}

    runner = step_graph.StepRunner(work, graphs=True)
    batches = [torch.ones(4, 3)] * (step_graph.WARMUP + 2) + [torch.ones(2, 3), torch.ones(4, 3)]
    for step, x in enumerate(batches):
        loss, _ = runner.run(step, x, then=lambda: None)
        assert loss.item() == x.numel()
    first = step_graph.WARMUP
    assert replayed == [first] * 3  # the capture's step, the one after it and the last; the odd batch ran eagerly
    assert ran[-2] == (first + 2, (2, 3)) and runner.how == "cuda-graph"


@pytest.mark.parametrize(
    "method, options",
    [("fcpts", {}), ("fcpts", {"reconstruction": "kl"}), ("fcpts-fixed", {}), ("fcpts-plus", {})],
    ids=["fcpts", "fcpts-kl", "fcpts-fixed", "fcpts-plus"],
)
def test_the_captured_step_holds_nothing_a_cuda_graph_cannot(method, options, monkeypatch):
    """What FCPTS's step does on a GPU, seen here: a CIFAR ResNet-20 (residual blocks, option-A shortcuts) at
    8 px, the step a capture would record."""
    guard = CaptureGuard()
    forced_on_this_cpu(monkeypatch, guarded_capture(guard))
    _, report = fcpts.get_method(method)(
        cifar_resnet("resnet20"), images(), 0.75, iterations=ITERATIONS, batch_size=8, progress=False, **options
    )
    assert report.extra["steps_on"] == "cuda-graph"
    assert {"aten.convolution", "aten.convolution_backward"} <= set(guard.ran)  # forward and backward were seen
    assert guard.uncapturable == []


def test_the_capture_guard_names_what_a_graph_cannot_hold():
    guard = CaptureGuard()
    x = torch.randn(8)
    with guard:
        float(x.sum())
        x[x > 0].sum()
        x * torch.tensor([2.0])
        torch.rand(2, generator=torch.Generator().manual_seed(0))
        x.abs().sum()
    assert guard.uncapturable == [
        "aten._local_scalar_dense: reads a value back to the host",
        "aten.index: a boolean-mask index (its shape depends on the data)",
        "aten.lift_fresh: a tensor built from host data",
        "aten.rand: a draw from an explicit generator",
    ]
