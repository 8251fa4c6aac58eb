"""The net-wise distillation loop shared by every training-loop method (FCPTS, STR, ProbMask): the student against a
frozen dense teacher on the same batches, with the caller's loss; the loop owns progress, history, the finiteness
checks and the checkpoint it resumes from."""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from . import step_graph
from .batch_workers import WorkerBatches, calibration_workers
from .bn import fold_batchnorm
from .calibration import Calibration, to_device
from .checkpoint import Checkpoint
from .io import tensors_sha256
from .options import MethodOptions, TrainingOptions, fitted_iterations, resolve_device

# (student output, teacher output, step) -> (loss, named loss terms). The terms are 0-dim tensors left on the
# device (detached); the loop reads them back every `log_every` steps, so computing them never waits.
LossFn = Callable[[torch.Tensor, torch.Tensor, int], "tuple[torch.Tensor, dict[str, torch.Tensor]]"]
# Options that change how a run is watched or saved, never its result.
NOT_IDENTITY = (
    "progress",
    "checkpoint",
    "checkpoint_every_s",
    "checkpoint_every_steps",
    "device",
    "log_every",
    "calibration_workers",
)
# Options added after runs were checkpointed: at these values a run's identity is what it was before they existed.
IDENTITY_WHEN_SET = {"amp": None, "cuda_graphs": True}


def kl_distill(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher || student) on softened outputs, summed, times T^2 / batch (released code)."""
    log_p_s = F.log_softmax(student_logits.flatten(1) / temperature, dim=1)
    p_t = F.softmax(teacher_logits.flatten(1) / temperature, dim=1)
    return F.kl_div(log_p_s, p_t, reduction="sum") * temperature**2 / student_logits.shape[0]


def kl_loss(temperature: float) -> LossFn:
    """The output KL alone as a loop's loss (STR, ProbMask)."""

    def loss_fn(y_s: torch.Tensor, y_t: torch.Tensor, _step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        rec = kl_distill(y_s, y_t, temperature)
        return rec, {"rec": rec.detach()}

    return loss_fn


def warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """LR factor: linear warm-up over `warmup` steps, then cosine to 0 at `total` (per iteration)."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def lr_schedulers(
    options: TrainingOptions, calib: Calibration, *optimizers: torch.optim.Optimizer
) -> tuple[list[torch.optim.lr_scheduler.LRScheduler], int]:
    """Each optimiser's `warmup_cosine` schedule over the run, warmed up over `warmup_iterations` (None: one epoch of
    `calib`); and that warm-up."""
    warmup = options.warmup_iterations if options.warmup_iterations is not None else calib.steps_per_epoch
    factor = warmup_cosine(warmup, fitted_iterations(options.iterations))
    return [torch.optim.lr_scheduler.LambdaLR(o, factor) for o in optimizers], warmup


def frozen_teacher(model: nn.Module, mode: str) -> nn.Module:
    """A copy of the dense model that never trains: "train" normalises with batch statistics (tracking none, which
    nothing reads), "eval" folds BatchNorm where torch.fx can trace the model (less work a step)."""
    teacher = copy.deepcopy(model)
    teacher.train(mode == "train")
    if mode == "train":
        for module in teacher.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.track_running_stats = False
    else:
        with contextlib.suppress(ValueError):  # not traceable: keep BN, same results
            fold_batchnorm(teacher)
    teacher.requires_grad_(False)
    return teacher


def run_identity(target: float, options: MethodOptions, calib: Calibration, model: nn.Module) -> dict:
    """Everything that changes a run's result: target, options, calibration images, the dense weights."""
    return {
        "target": target,
        "options": {
            k: v
            for k, v in options.to_dict().items()
            if k not in NOT_IDENTITY and not (k in IDENTITY_WHEN_SET and v == IDENTITY_WHEN_SET[k])
        },
        "calibration": calib.indices,
        "dense_weights": tensors_sha256(model.state_dict()),
    }


def run_checkpoint(options: MethodOptions, identity: dict, label: str, path: str | None = None) -> Checkpoint:
    return Checkpoint(
        path or options.checkpoint,
        identity,
        every_s=options.checkpoint_every_s,
        every_steps=options.checkpoint_every_steps,
        label=label,
    )


@dataclass
class LoopResult:
    history: list[dict] = field(default_factory=list)
    resumed_from_step: int = 0
    wall_s: float = 0.0
    steps_on: dict[str, Any] = field(default_factory=dict)  # how the steps ran, where CUDA graphs were asked for


def _finite_or_raise(value: float, what: str, step: int, desc: str, detail: str = "") -> None:
    if not math.isfinite(value):
        raise FloatingPointError(
            f"{desc}: {what} is {value} at step {step}{detail}; check the calibration images and the dense "
            "model's outputs for NaN/Inf, or lower the learning rate"
        )


class StepLog:
    """Each step's loss terms stay on the device; every `log_every` steps they are read back at once (one host
    synchronisation), checked for NaN/Inf and appended to the history (`step_s`: the interval's time per step)."""

    def __init__(self, history: list[dict], desc: str, log_every: int):
        self.history, self.desc, self.log_every = history, desc, log_every
        self.rows: list[torch.Tensor] = []
        self.steps: list[tuple[int, float]] = []  # (step, lr) of each pending row
        self.names: list[str] = []
        self.restart_clock()

    def restart_clock(self) -> None:
        self.t0 = time.perf_counter()

    def add(self, step: int, loss: torch.Tensor, logs: dict[str, Any], lr: float) -> None:
        self.names = list(logs)
        values = [v.detach() if isinstance(v, torch.Tensor) else loss.new_tensor(v) for v in logs.values()]
        self.rows.append(torch.stack([loss.detach().float(), *(v.float().reshape(()) for v in values)]))
        self.steps.append((step, lr))

    def flush(self) -> dict[str, float]:
        """Read the pending steps back, check them, append them to the history; returns the last step's terms."""
        if not self.rows:
            return {}
        table = torch.stack(self.rows).cpu().tolist()
        step_s = (time.perf_counter() - self.t0) / len(table)
        (first, _), (last, _) = self.steps[0], self.steps[-1]
        for (step, lr), (loss, *terms) in zip(self.steps, table):
            logs = dict(zip(self.names, terms))
            if not math.isfinite(loss):
                shown = ", ".join(f"{k} {v:.4g}" for k, v in logs.items())
                where = f" ({shown}; losses are read every {self.log_every} steps, steps {first}-{last} here)"
                _finite_or_raise(loss, "the loss", step, self.desc, where)
            self.history.append(
                {
                    "step": step,
                    "loss": round(loss, 6),
                    **{k: round(v, 8) for k, v in logs.items()},
                    "lr": lr,
                    "step_s": round(step_s, 5),
                }
            )
        self.rows, self.steps = [], []
        self.restart_clock()
        return logs


def autocast(amp: str | None, device: torch.device, cache: bool = True) -> contextlib.AbstractContextManager:
    """The forwards' precision: float32 (None) or bfloat16 under torch.autocast ("bf16"); `cache=False` where the
    forward is captured in a CUDA graph (a capture cannot hold autocast's cache of cast weights)."""
    if amp is None:
        return contextlib.nullcontext()
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"amp='bf16' needs bfloat16 support, which {torch.cuda.get_device_name(device)} lacks")
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)


class StepBatches:
    """step -> that step's calibration batch on the device (NHWC for channels-last models), its host part made here
    or by worker processes while `from_workers` is open (the same values)."""

    def __init__(self, calib: Calibration, device: torch.device, channels_last: bool = False):
        self.calib, self.device, self.channels_last = calib, device, channels_last
        self.host: Callable[[int], torch.Tensor] = calib.batch
        self.workers = 0  # how many made the batches of the last `from_workers`

    def __call__(self, step: int) -> torch.Tensor:
        x = to_device(self.host(step), self.device)
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    @contextlib.contextmanager
    def from_workers(self, asked: int | None, start: int, stop: int) -> Iterator[None]:
        """Inside: the host batches of steps `start`..`stop - 1` come from worker processes (`asked`, or the
        default for this device and data: `batch_workers.calibration_workers`)."""
        self.workers = calibration_workers(asked, self.calib, self.device) if start < stop else 0
        if self.workers == 0:
            yield
            return
        made = WorkerBatches(self.calib, start, stop, self.workers, pin=self.device.type == "cuda")
        self.host = made
        try:
            yield
        finally:
            self.host = self.calib.batch
            made.close()


class Prefetched:
    """`batches` one step ahead on a GPU, its copy on a stream of its own, so the host prepares step k+1's batch while
    the device computes step k; a fetch that fails ahead is made again at its own step, where its error belongs."""

    def __init__(self, batches: Callable[[int], torch.Tensor], ahead: bool, device: torch.device | None = None):
        self.batches, self.ahead = batches, ahead
        self.next: tuple[int, torch.Tensor] | None = None
        on_gpu = ahead and device is not None and device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if on_gpu else None

    def __call__(self, step: int) -> torch.Tensor:
        ready, self.next = self.next, None
        if ready is None or ready[0] != step:
            return self.batches(step)
        if self.stream is not None:  # the step's kernels wait for the copy; its memory stays theirs until they end
            current = torch.cuda.current_stream(self.stream.device)
            current.wait_stream(self.stream)
            ready[1].record_stream(current)
        return ready[1]

    def fetch_after(self, step: int, iterations: int) -> None:
        if self.ahead and step + 1 < iterations:
            try:
                with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
                    self.next = (step + 1, self.batches(step + 1))
            except Exception:
                self.next = None


def train_loop(
    model: nn.Module,
    teacher: nn.Module,
    batches: StepBatches,
    options: TrainingOptions,
    schedulers: Sequence[torch.optim.lr_scheduler.LRScheduler],
    loss_fn: LossFn,
    checkpoint: Checkpoint,
    *,
    desc: str = "distill",
    before_step: Callable[[int], None] | None = None,
    after_step: Callable[[int], None] | None = None,
    cuda_graphs: bool = False,
) -> LoopResult:
    """`options.iterations` steps of the student against the frozen teacher, resumed from `checkpoint`; nothing in a
    step waits for the device, and with `cuda_graphs` the steps are replayed from a CUDA graph."""
    iterations, device = fitted_iterations(options.iterations), resolve_device(None, model)
    optimizers = [sch.optimizer for sch in schedulers]
    result, elapsed_before = LoopResult(), 0.0
    state = checkpoint.load()
    if state is not None:  # resumed: the models, optimisers, schedulers and history as saved
        model.load_state_dict(state["model"])
        teacher.load_state_dict(state["teacher"])
        for sch, o_state, s_state in zip(schedulers, state["optimizers"], state["schedulers"]):
            sch.optimizer.load_state_dict(o_state)
            sch.load_state_dict(s_state)
        result.history, result.resumed_from_step, elapsed_before = state["history"], state["step"], state["elapsed_s"]
    autocast(options.amp, device)  # an unusable precision fails before the first step
    t0 = time.perf_counter()

    def save(step: int) -> None:
        state = {"step": step, "model": model.state_dict(), "teacher": teacher.state_dict()}
        state["optimizers"] = [o.state_dict() for o in optimizers]
        state["schedulers"] = [sch.state_dict() for sch in schedulers]
        state.update(history=result.history, elapsed_s=elapsed_before + time.perf_counter() - t0)
        checkpoint.save(state, step, f"step {step}")

    start = result.resumed_from_step
    log = StepLog(result.history, desc, options.log_every)
    model.train()
    bar = tqdm(
        range(start, iterations),
        initial=start,
        total=iterations,
        disable=not options.progress,
        desc=desc,
        dynamic_ncols=True,
    )
    fetch = Prefetched(batches, ahead=device.type == "cuda", device=device)
    graphs = cuda_graphs and step_graph.can_capture(device)

    def forward_backward(step: int, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        for o in optimizers:  # before the forward: last step's gradients (4 bytes a parameter) are let go first
            o.zero_grad(set_to_none=True)
        with autocast(options.amp, device, cache=not graphs):
            with torch.no_grad():
                y_t = teacher(x)
            if step == start:  # the one read-back inside a step, on the first one only
                _finite_or_raise(float(y_t.float().abs().sum()), "the dense teacher's output", step, desc)
            loss, logs = loss_fn(model(x).float(), y_t.float(), step)
        loss.backward()
        return loss, logs

    def optimizer_steps() -> None:
        for o in optimizers:
            o.step()

    runner = step_graph.StepRunner(forward_backward, graphs)
    with batches.from_workers(options.calibration_workers, start, iterations):
        for step in bar:
            if before_step is not None:
                before_step(step)
            x = fetch(step)
            loss, logs = runner.run(step, x, then=optimizer_steps)
            for sch in schedulers:
                sch.step()
            if after_step is not None:
                after_step(step)
            fetch.fetch_after(step, iterations)
            log.add(step, loss, logs, cast(float, schedulers[0].get_last_lr()[0]))  # a Tensor only for a Tensor lr
            if (step + 1 - start) % options.log_every == 0 or step + 1 == iterations:
                bar.set_postfix({k: f"{v:.4g}" for k, v in log.flush().items()})
            if checkpoint.due(step + 1):
                log.flush()
                save(step + 1)
                log.restart_clock()
    bar.close()
    log.flush()
    if iterations > start and checkpoint.last_step != iterations:
        save(iterations)
    result.wall_s = elapsed_before + time.perf_counter() - t0
    result.steps_on = runner.report()
    if batches.workers:  # where none did (a CPU), the report is as before
        result.steps_on["batch_workers"] = batches.workers
    return result
