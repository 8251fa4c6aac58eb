"""Benchmark: one FCPTS step's time over one plain training step's (same model, batch and device), in pairs (on a CPU
inside its batch fetch, on a GPU just before); the teacher's forward alone is the floor of the ratio."""

from __future__ import annotations

import copy
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import fcpts
from benchmarks import parser
from benchmarks.report import measure_then_emit, synchronize
from fcpts.core import step_graph
from fcpts.core.loop import frozen_teacher
from fcpts.core.options import resolve_device
from tasks.grid.cifar_models import CIFAR_MODELS, cifar_resnet
from tasks.grid.help import default_device
from tasks.grid.records import device_description

WARMUP = step_graph.WARMUP + 1  # FCPTS's eager steps before its CUDA graph, and the step that captures it


class PlainStep:
    """A timed plain SGD step of its own copy of the model, then, timed apart, the forward of FCPTS's teacher (the
    ratio's floor); with `graphs` both replay from CUDA graphs after the warm-up, as FCPTS's steps do."""

    def __init__(self, model, x, y, graphs: bool = False):
        self.model = copy.deepcopy(model).train().to(memory_format=torch.channels_last)
        self.teacher = frozen_teacher(self.model, "train")
        device = next(self.model.parameters()).device
        self.x, self.y = x.to(device).contiguous(memory_format=torch.channels_last), y.to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9, weight_decay=3e-4)
        self.step_runner = step_graph.StepRunner(self._forward_backward, graphs)
        self.teacher_runner = step_graph.StepRunner(self._teacher_forward, graphs)
        self.count = 0
        self.times: list[float] = []
        self.teacher_times: list[float] = []

    def _forward_backward(self, step: int, x: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(self.model(x), self.y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        return loss

    def _teacher_forward(self, step: int, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.teacher(x)

    def __call__(self) -> None:
        synchronize(self.x.device)
        t = time.perf_counter()
        self.step_runner.run(self.count, self.x, then=self.opt.step)
        synchronize(self.x.device)
        t_teacher = time.perf_counter()
        self.times.append(t_teacher - t)
        self.teacher_runner.run(self.count, self.x, then=lambda: None)
        synchronize(self.x.device)
        self.teacher_times.append(time.perf_counter() - t_teacher)
        self.count += 1

    def check_replayed(self) -> None:
        """After the warm-up, with graphs: both steps replay (a failed capture would time eager steps as replayed)."""
        for what, runner in (("plain step", self.step_runner), ("teacher forward", self.teacher_runner)):
            if runner.graphs and runner.how != "cuda-graph":
                raise RuntimeError(f"the {what} was to replay from a CUDA graph but runs {runner.how}")


class PairedImages(TensorDataset):
    """Calibration images that run one plain step each time a whole batch (all of them) has been fetched."""

    def __init__(self, x: torch.Tensor, plain: PlainStep):
        super().__init__(x.cpu())
        self.plain, self.fetched = plain, 0

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        self.fetched += 1
        if self.fetched % len(self) == 0:
            self.plain()
        return super().__getitem__(i)


def paired_step_times(model, x, y, steps: int, **options) -> tuple[list[float], list[float], list[float]]:
    """(FCPTS step times, plain step times, teacher forward times) of the pairs after WARMUP steps of one FCPTS
    run; on a GPU the plain steps run before it (inside, they would wait for its queued work)."""
    device = next(model.parameters()).device
    graphs = replays(options, device)
    plain = PlainStep(model, x, y, graphs)
    for _ in range(WARMUP):
        plain()
    plain.check_replayed()
    plain.times.clear()
    plain.teacher_times.clear()
    on_gpu = device.type == "cuda"
    if on_gpu:
        for _ in range(WARMUP + steps):
            plain()
    images = TensorDataset(x) if on_gpu else PairedImages(x, plain)
    _, report = fcpts.sparsify(
        copy.deepcopy(model), images, 0.9, iterations=WARMUP + steps, batch_size=len(x), progress=False,
        log_every=1, **options,
    )  # fmt: skip
    if graphs and report.extra.get("steps_on") != "cuda-graph":
        raise RuntimeError(f"FCPTS was to replay its steps from a CUDA graph but ran {report.extra.get('steps_on')}")
    inside = [0.0 if on_gpu else p + t for p, t in zip(plain.times, plain.teacher_times)]
    fcpts_times = [h["step_s"] - paired for h, paired in zip(report.history, inside)]
    return fcpts_times[WARMUP:], plain.times[WARMUP:], plain.teacher_times[WARMUP:]


def replays(options: dict, device: torch.device) -> bool:
    """Whether FCPTS with these options replays its steps from a CUDA graph on `device` (its default, unless set)."""
    asked = options.get("cuda_graphs", getattr(fcpts.get_method("fcpts").options(), "cuda_graphs", False))
    return bool(asked) and step_graph.can_capture(device)


def configurations(amp: str | None, device: torch.device) -> dict[str, dict]:
    """FCPTS option sets: the defaults and the paper's KL, each under `amp` if given, and on a GPU each eager."""
    configs: dict[str, dict] = {"mse-blocks (defaults)": {}, "kl": {"reconstruction": "kl"}}
    if amp:
        configs |= {f"{name}, amp {amp}": {**opts, "amp": amp} for name, opts in configs.items()}
    if step_graph.can_capture(device):
        configs |= {f"{name}, eager": {**opts, "cuda_graphs": False} for name, opts in configs.items()}
    return configs


def model_and_images(name: str) -> tuple[nn.Module, int, int]:
    """(random-weight model, image size, classes): a CIFAR ResNet at 32 px, else an ImageNet architecture at 224."""
    if name in CIFAR_MODELS:
        return cifar_resnet(name), 32, 10
    from tasks.imagenet.models import architecture

    return architecture(name), 224, 1000


def run(args) -> list[str]:
    device = resolve_device(default_device(args.device))
    torch.manual_seed(0)
    model, size, classes = model_and_images(args.model)
    model = model.to(device)
    x = torch.randn(args.batch_size, 3, size, size)  # on the host, as calibration images are
    y = torch.randint(0, classes, (args.batch_size,))
    configs = configurations(args.amp, device)
    timed: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in configs}
    by_round: dict[str, list[float]] = {name: [] for name in configs}  # each round's median ratio: the spread
    floors: dict[str, tuple[list[float], list[float]]] = {}  # plain and teacher times by how the steps ran
    for _ in range(args.rounds):
        for name, options in configs.items():
            fcpts_times, plain_times, teacher_times = paired_step_times(
                model, x, y, args.steps, device=str(device), **options
            )
            timed[name][0].extend(fcpts_times)
            timed[name][1].extend(plain_times)
            by_round[name].append(statistics.median(f / p for f, p in zip(fcpts_times, plain_times)))
            plain_all, teacher_all = floors.setdefault("replayed" if replays(options, device) else "eager", ([], []))
            plain_all.extend(plain_times)
            teacher_all.extend(teacher_times)
    lines = [
        f"model {args.model} at {size} px, batch {args.batch_size}, {device_description(device)}, {args.rounds} "
        f"rounds of {args.steps} FCPTS steps, each paired with a plain step"
        + (" run before the FCPTS run" if device.type == "cuda" else "")
        + (", replayed from a CUDA graph where FCPTS's is" if "replayed" in floors else "")
        + " (ratio: median over pairs"
        + ("; rounds: the lowest and highest of the rounds' medians)" if args.rounds > 1 else ")"),
    ]
    for name, (fcpts_times, plain_times) in timed.items():
        ratio = statistics.median(f / p for f, p in zip(fcpts_times, plain_times))
        spread = f", rounds {min(by_round[name]):.2f} to {max(by_round[name]):.2f}" if args.rounds > 1 else ""
        lines.append(
            f"fcpts step, {name:36s}: {statistics.median(fcpts_times) * 1000:8.2f} ms, plain step "
            f"{statistics.median(plain_times) * 1000:8.2f} ms, ratio {ratio:.2f}{spread}"
        )
    for mode, (plain_all, teacher_all) in floors.items():
        share = round(statistics.median(t / p for t, p in zip(teacher_all, plain_all)), 2)
        how = f", {mode}" if len(floors) > 1 else ""
        lines.append(
            f"teacher forward alone (no gradient, batch statistics){how}: {statistics.median(teacher_all) * 1000:8.2f}"
            f" ms, {share:.2f} of the plain step after it (median over pairs): no FCPTS step's ratio can be below "
            f"{1 + share:.2f}"
        )
    return lines


def main(argv=None) -> None:
    args = parser("step-time").parse_args(argv)
    measure_then_emit(lambda: run(args), args.out)
