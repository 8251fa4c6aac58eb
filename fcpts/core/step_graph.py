"""A training step replayed from one CUDA graph (FCPTS's forward and backward, POT's whole step): thousands of small
operators launched at once instead of from Python; where the capture fails the steps go on eagerly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import torch

WARMUP = 3  # eager steps before the capture

Out = TypeVar("Out")  # what a step's work returns (FCPTS: its loss and logged terms)
Replay = Callable[[], None]


def can_capture(device: torch.device) -> bool:
    """CUDA graphs exist on CUDA devices only."""
    return device.type == "cuda"


def capture(work: Callable[[int, torch.Tensor], Out], step: int, static_x: torch.Tensor) -> tuple[Replay, Out]:
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


class StepRunner(Generic[Out]):
    """Runs each step's `work(step, batch)` then `then`, eagerly or (`graphs`) from a CUDA graph after `WARMUP` eager
    steps; `work` sets its gradients to None before its backward, so the capture allocates what replays rewrite."""

    def __init__(self, work: Callable[[int, torch.Tensor], Out], graphs: bool):
        self.work, self.graphs = work, graphs
        self.warmed = 0
        self.recorded: tuple[Replay, torch.Tensor, Out] | None = None  # the replay, its input, its outputs
        self.how = "eager"  # until a capture is tried: then "cuda-graph", or why it failed
        self.replayed_from: int | None = None

    def run(self, step: int, x: torch.Tensor, then: Callable[[], None]) -> Out:
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

    def _replayed(self, step: int, x: torch.Tensor) -> Out:
        if self.recorded is None and self.how == "eager":
            static_x = x.clone()
            try:
                replay, out = capture(self.work, step, static_x)
            except RuntimeError as err:
                self.how = f"eager (CUDA graph capture failed: {str(err).splitlines()[0][:120]})"
            else:
                self.recorded, self.how, self.replayed_from = (replay, static_x, out), "cuda-graph", step
        if self.recorded is None:
            return self.work(step, x)
        replay, static_x, out = self.recorded
        if (x.shape, x.stride(), x.dtype) != (static_x.shape, static_x.stride(), static_x.dtype):
            return self.work(step, x)  # a batch the graph was not recorded for: this step runs eagerly
        static_x.copy_(x)
        replay()
        return out

    def report(self) -> dict[str, Any]:
        """How the steps ran, for a run's report (only where graphs were asked for)."""
        return {"steps_on": self.how, "replayed_from_step": self.replayed_from} if self.graphs else {}
