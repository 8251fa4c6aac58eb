"""Benchmark: where one FCPTS step's time goes on a GPU, per step, against a plain training step.

Why: on an H200 an FCPTS step at batch 64 cost 2.7 plain steps on CIFAR ResNet-56 and 4.4 on ImageNet ResNet-18
at 224 px (docs/notebook/benchmarks.md), and a profile of a whole run mixed its set-up and export into the steps.
Here runs of n and 2n steps are profiled and differenced, so set-up and export cancel and what is left is one
step's: the host's own time, the device's busy time, kernel launches, host-to-device copies, and the times the
host waits for the device (`cudaStreamSynchronize`). With CUDA's sync debug mode on, every operation that makes
the host wait warns; the warnings are counted by the source line that made them, per step. A step whose host time
exceeds its device time is host-bound: fewer launches or waits, not faster kernels, would shorten it.

    python -m benchmarks.speed.step_profile --device cuda --model resnet18 --out step_profile_cuda.txt

On a CPU it runs the same differencing (host time only; nothing to wait for): the GPU check's dry run.
"""

from __future__ import annotations

import argparse
import copy
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import fcpts
from benchmarks.report import measure_then_emit
from benchmarks.speed.method_time import Images
from benchmarks.speed.step_ops import plain_steps
from benchmarks.speed.step_time import model_and_images
from fcpts.core.options import resolve_device
from tasks.grid.paths import REPO_ROOT
from tasks.grid.records import device_description

LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
GRAPH_LAUNCH = "cudaGraphLaunch"  # a replayed CUDA graph: its kernels in one launch (fcpts/core/step_graph.py)
WAIT = "cudaStreamSynchronize"
COPY = "cudaMemcpyAsync"


def profiled(run: Callable[[], None], device: torch.device) -> dict[str, Counter]:
    """Calls, self host time and self device time (ms) by event name over one call of `run`."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    calls, host, kernels, by_op = Counter(), Counter(), Counter(), Counter()
    for e in prof.key_averages():
        device_ms = getattr(e, "self_device_time_total", 0.0) / 1000
        if e.device_type == DeviceType.CUDA:  # a kernel or a copy on the device
            kernels[e.key] += device_ms
            continue
        calls[e.key] += e.count
        host[e.key] += e.self_cpu_time_total / 1000
        by_op[e.key] += device_ms  # the device time of the kernels this operator launched itself
    return {"calls": calls, "host_ms": host, "device_ms": kernels, "op_device_ms": by_op}


def per_step(run: Callable[[int], None], steps: int, device: torch.device) -> dict[str, Counter]:
    """One step's share: a run of 2n steps less a run of n, over n (set-up and export cancel out)."""
    few, more = profiled(lambda: run(steps), device), profiled(lambda: run(2 * steps), device)
    return {k: Counter({n: (more[k][n] - few[k][n]) / steps for n in more[k].keys() | few[k].keys()}) for k in few}


def sync_sites(run: Callable[[int], None], steps: int) -> Counter:
    """Per step, the source lines whose operations made the host wait for the device (CUDA's sync debug mode)."""

    def sites(n: int) -> Counter:
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run(n)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        found = Counter()
        for w in caught:
            if "synchroniz" in str(w.message):
                path = Path(w.filename)
                where = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path.name
                found[f"{where}:{w.lineno}"] += 1
        return found

    few, more = sites(steps), sites(2 * steps)
    return Counter({k: (more[k] - few[k]) / steps for k in more.keys() | few.keys() if more[k] != few[k]})


def summary(label: str, step: dict[str, Counter]) -> str:
    launches = sum(step["calls"][n] for n in LAUNCHES)
    return (
        f"{label}: host {sum(step['host_ms'].values()):7.2f} ms, device {sum(step['device_ms'].values()):7.2f} ms, "
        f"{launches:6.0f} kernel launches, {step['calls'][GRAPH_LAUNCH]:3.0f} graph launches, "
        f"{step['calls'][WAIT]:4.0f} waits for the device "
        f"({step['host_ms'][WAIT]:.2f} ms), {step['calls'][COPY]:4.0f} async copies"
    )


def most(values: Counter, top: int, skip: tuple[str, ...] = ()) -> str:
    kept = Counter({k: v for k, v in values.items() if k not in skip and v > 0})
    return ", ".join(f"{k} {v:.2f}" for k, v in kept.most_common(top))


def measure(model_name: str, batch_size: int, steps: int, device: torch.device, top: int = 8) -> list[str]:
    torch.manual_seed(0)
    model, size, _ = model_and_images(model_name)
    model = model.to(device)
    x = torch.randn(batch_size, 3, size, size)  # on the host, as calibration images are

    def fcpts_run(n: int) -> None:
        fcpts.sparsify(copy.deepcopy(model), Images(x), 0.9, iterations=n, batch_size=batch_size, progress=False,
                       device=str(device))  # fmt: skip

    plain_run = plain_steps(model, x.to(device))
    fcpts_run(1), plain_run(1)  # one-time costs (kernels' first launch, cuDNN's choices) outside the profiles
    plain, step = per_step(plain_run, steps, device), per_step(fcpts_run, steps, device)
    lines = [
        f"model {model_name} at {size} px, batch {batch_size}, {device_description(device)}; runs of {steps} and "
        f"{2 * steps} steps profiled and differenced: one step's share (times in ms)",
        summary("plain step", plain),
        summary("fcpts step", step),
        f"plain host, most: {most(plain['host_ms'], top)}",
        f"fcpts host, most: {most(step['host_ms'], top)}",
        f"fcpts device by operator, most: {most(step['op_device_ms'], top)}",
    ]
    if device.type == "cuda":
        sites = sync_sites(fcpts_run, steps)
        lines.append(f"fcpts waits by source line: {', '.join(f'{k} {v:.1f}' for k, v in sites.most_common(top))}")
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18", help="a CIFAR ResNet (32 px) or an ImageNet architecture (224 px)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=5, help="n: runs of n and 2n steps are differenced")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", help="also write the output (with its provenance) to this file")
    args = p.parse_args(argv)
    measure_then_emit(lambda: measure(args.model, args.batch_size, args.steps, resolve_device(args.device)), args.out)


if __name__ == "__main__":
    main()
