"""A training-loop step's forward and backward replayed from one CUDA graph.

Why: an FCPTS step dispatches some 2,500 small operators (the teacher's forward, each layer's mask and bridge
terms, the losses; results/benchmarks/step_ops_cpu.txt), and on a GPU it costs what launching them from Python
costs: 2.67 plain steps on an H200 at CIFAR size (results/benchmarks/step_time_cuda.txt), where the arithmetic is
a few milliseconds. Replayed from a graph, the kernels are launched at once. The optimisers and schedulers stay
eager (the learning rate changes every step), and so does everything before a step (pinned thresholds, the
batch's fetch, which is copied into the graph's input).

`StepRunner.run` does one step: `WARMUP` eager steps on a side stream (as CUDA graphs ask), then the capture
of the forward and backward, then replays. A replay rewrites the same output tensors, so the loop's step log
copies them before the next replay (it stacks them at once). Only loops whose forward and backward do the same
work at every step may replay (FCPTS's: its loss does not depend on the step). Where the capture fails, the
steps go on eagerly and `how` says why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

WARMUP = 3  # eager steps before the capture

Work = Callable[[int, torch.Tensor], tuple[torch.Tensor, dict[str, Any]]]  # (step, batch) -> (loss, logs)
Replay = Callable[[], None]


def can_capture(device: torch.device) -> bool:
    """CUDA graphs exist on CUDA devices only."""
    return device.type == "cuda"


def capture(work: Work, step: int, static_x: torch.Tensor) -> tuple[Replay, tuple[torch.Tensor, dict[str, Any]]]:
    """Record `work(step, static_x)` as a CUDA graph; returns its replay and the outputs each replay rewrites."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = work(step, static_x)
    return graph.replay, out


@contextlib.contextmanager
def side_stream() -> Iterator[None]:
    """Work on a side stream, ordered after the current stream's and before what follows it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        yield
    torch.cuda.current_stream().wait_stream(side)


class StepRunner:
    """Runs each step's `work` (forward and backward, gradients left in `.grad`) then `then` (the optimisers),
    eagerly, or with `graphs` (a GPU only) from a CUDA graph after `WARMUP` eager steps."""

    def __init__(self, work: Work, optimizers: list[torch.optim.Optimizer], graphs: bool):
        self.work, self.optimizers, self.graphs = work, optimizers, graphs
        self.warmed = 0
        self.replay: Replay | None = None
        self.static: tuple[torch.Tensor, tuple[torch.Tensor, dict[str, Any]]] | None = None
        self.how = "eager"
        self.replayed_from: int | None = None

    def run(self, step: int, x: torch.Tensor, then: Callable[[], None]) -> tuple[torch.Tensor, dict[str, Any]]:
        if not self.graphs:
            out = self.work(step, x)
        elif self.warmed < WARMUP:
            with side_stream():
                out = self.work(step, x)
                then()
            self.warmed += 1
            return out
        else:
            out = self._replayed(step, x)
        then()
        return out

    def _replayed(self, step: int, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        if self.replay is None and self.how == "eager":
            static_x = x.clone()
            self._drop_gradients()  # the captured backward allocates the gradients each replay then rewrites
            try:
                self.replay, out = capture(self.work, step, static_x)
            except RuntimeError as err:
                self._drop_gradients()
                self.how = f"eager (CUDA graph capture failed: {str(err).splitlines()[0][:120]})"
            else:
                self.static, self.how, self.replayed_from = (static_x, out), "cuda-graph", step
        if self.replay is None or self.static is None:
            return self.work(step, x)
        static_x, out = self.static
        if (x.shape, x.stride(), x.dtype) != (static_x.shape, static_x.stride(), static_x.dtype):
            return self.work(step, x)  # a batch the graph was not recorded for: this step runs eagerly
        static_x.copy_(x)
        self.replay()
        return out

    def _drop_gradients(self) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=True)

    def report(self) -> dict[str, Any]:
        """How the steps ran, for a run's report (only where graphs were asked for)."""
        return {"steps_on": self.how, "replayed_from_step": self.replayed_from} if self.graphs else {}
