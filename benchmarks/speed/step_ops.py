"""Benchmark: the operators one FCPTS step dispatches over one plain training step's, counted on a CPU (a GPU step at
CIFAR size is launch-bound): per step, runs of n and 2n steps differenced; FCPTS's additions by name."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import fcpts
from benchmarks import parser
from benchmarks.report import measure_then_emit
from tasks.grid.cifar_models import cifar_resnet

# Operators that only make a new view or an empty buffer: no kernel on a GPU.
NO_KERNEL = {
    f"aten::{name}"
    for name in (
        "detach detach_ select view reshape _reshape_alias as_strided permute transpose t expand expand_as unsqueeze "
        "squeeze slice alias unflatten flatten narrow split chunk unbind view_as lift_fresh empty empty_like "
        "empty_strided result_type"
    ).split()
}
# Operators that copy only when they must (another dtype, device or layout): a kernel only if they call another.
COPY_IF_NEEDED = {"aten::to", "aten::contiguous", "aten::type_as"}


def top_level_ops(fn: Callable[[], None]) -> Counter:
    """The aten operators `fn` dispatches that no other aten operator called and that do work, by name."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return Counter(
        e.name
        for e in prof.events()
        if e.name.startswith("aten::")
        and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
        and e.name not in NO_KERNEL
        and (e.name not in COPY_IF_NEEDED or bool(e.cpu_children))
    )


def per_step(run: Callable[[int], None], steps: int) -> Counter:
    """Operators of one step: the counts of 2n steps less those of n, over n (setup cancels out)."""
    few, more = top_level_ops(lambda: run(steps)), top_level_ops(lambda: run(2 * steps))
    return Counter({k: (more[k] - few[k]) / steps for k in more.keys() | few.keys() if more[k] != few[k]})


def plain_steps(model: torch.nn.Module, x: torch.Tensor) -> Callable[[int], None]:
    """Plain SGD steps in FCPTS's memory format, as step-time runs them."""

    def run(steps: int) -> None:
        m = copy.deepcopy(model).train().to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=3e-4)
        xb = x.contiguous(memory_format=torch.channels_last)
        y = torch.zeros(len(x), dtype=torch.long, device=x.device)
        for _ in range(steps):
            loss = F.cross_entropy(m(xb), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    return run


def sparsify_steps(model: torch.nn.Module, x: torch.Tensor, **overrides) -> Callable[[int], None]:
    """A method's steps (FCPTS's unless `method` is given), one batch of all of x each."""

    def run(steps: int) -> None:
        fcpts.sparsify(copy.deepcopy(model), x, 0.9, iterations=steps, batch_size=len(x), progress=False, **overrides)

    return run


def measure(model_name: str, batch_size: int, steps: int, top: int = 8) -> list[str]:
    torch.manual_seed(0)
    model = cifar_resnet(model_name)
    x = torch.randn(batch_size, 3, 32, 32)
    plain = per_step(plain_steps(model, x), steps)
    n_plain = sum(plain.values())
    lines = [
        f"model {model_name}, batch {batch_size}, top-level aten operators per step (runs of {steps} and "
        f"{2 * steps} steps differenced), counted on a CPU; ratio: FCPTS step over plain step",
        f"plain step                        : {n_plain:7.0f} operators",
    ]
    for label, options in (("mse-blocks (defaults)", {}), ("kl", {"reconstruction": "kl"})):
        ops = per_step(sparsify_steps(model, x, **options), steps)
        total = sum(ops.values())
        added = Counter({k: ops[k] - plain.get(k, 0) for k in ops})
        most = ", ".join(f"{k.removeprefix('aten::')} {v:+.0f}" for k, v in added.most_common(top))
        ratio = total / n_plain
        lines.append(f"fcpts step, {label:22s}: {total:7.0f} operators, ratio {ratio:.2f}; most added: {most}")
    first_stage = lambda module, name: name.startswith("layer1.")  # noqa: E731 - one stacked group of POT's
    pot = per_step(sparsify_steps(model, x, method="pot-l2norm", filter_fn=first_stage), 50 * steps)  # checks every 50
    most = ", ".join(f"{k.removeprefix('aten::')} {v:.0f}" for k, v in pot.most_common(top))
    lines.append(f"pot step, layer1 stacked group     : {sum(pot.values()):7.0f} operators; most: {most}")
    return lines


def main(argv=None) -> None:
    args = parser("step-ops").parse_args(argv)
    measure_then_emit(lambda: measure(args.model, args.batch_size, args.steps), args.out)
