"""Benchmark (one-off): where the block MSE's time goes in an FCPTS step on a CPU. Self time per aten operator and
step (runs of n and 2n steps differenced, under torch.profiler) of FCPTS with the default block MSE, with the output
KL alone, and with the KL alone while hooks keep the teacher's block outputs as the block MSE does (nothing else)."""

from __future__ import annotations

import copy
import sys
from collections import Counter
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

import fcpts
from benchmarks.report import measure_then_emit
from fcpts.methods import fcpts as fcpts_method
from tasks.grid.cifar_models import cifar_resnet


def self_ms(run: Callable[[int], None], steps: int) -> Counter:
    """Self CPU milliseconds per step of each aten operator: a run of 2n steps minus a run of n."""
    totals = []
    for n in (steps, 2 * steps):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run(n)
        totals.append(Counter({e.key: e.self_cpu_time_total / 1000 for e in prof.key_averages()}))
    return Counter({k: (totals[1][k] - totals[0][k]) / steps for k in totals[1] | totals[0]})


def teacher_keeping_block_outputs(kept: list) -> Callable:
    """frozen_teacher, whose blocks' outputs are kept until the next forward (what the block MSE holds)."""
    make = fcpts_method.frozen_teacher

    def frozen_teacher(model, mode):
        teacher = make(model, mode)
        blocks = fcpts_method.default_blocks(teacher)

        def keep(_module, _inputs, output):
            if len(kept) == len(blocks):
                kept.clear()
            kept.append(output)

        modules = dict(teacher.named_modules())
        for name in blocks:
            modules[name].register_forward_hook(keep)
        return teacher

    return frozen_teacher


def measure(steps: int = 10, rounds: int = 2) -> list[str]:
    torch.manual_seed(0)
    model, x = cifar_resnet("resnet56"), torch.randn(64, 3, 32, 32)

    def run(reconstruction: str, keep_teacher_blocks: bool = False) -> Callable[[int], None]:
        def steps_of(n: int) -> None:
            original = fcpts_method.frozen_teacher
            if keep_teacher_blocks:
                fcpts_method.frozen_teacher = teacher_keeping_block_outputs([])
            try:
                fcpts.sparsify(
                    copy.deepcopy(model), x, 0.9, iterations=n, batch_size=64, progress=False,
                    reconstruction=reconstruction,
                )  # fmt: skip
            finally:
                fcpts_method.frozen_teacher = original

        return steps_of

    configs = {"mse": run("mse-blocks"), "kl": run("kl"), "kl+kept": run("kl", keep_teacher_blocks=True)}
    run("kl")(2)  # warm-up
    lines = [
        f"FCPTS on CIFAR ResNet-56, batch 64, CPU, {torch.get_num_threads()} threads: self time per aten operator "
        f"and step in ms (torch.profiler; runs of {steps} and {2 * steps} steps differenced), {rounds} rounds "
        "alternated; mse: the default block MSE, kl: the output KL alone, kl+kept: the KL alone with the teacher's "
        "block outputs kept as the block MSE keeps them"
    ]
    per_round = [{name: self_ms(fn, steps) for name, fn in configs.items()} for _ in range(rounds)]
    for r, ms in enumerate(per_round, 1):
        totals = ", ".join(f"{name} {sum(v.values()):.1f}" for name, v in ms.items())
        lines.append(f"round {r}: all operators {totals}")
    mse_extra: Counter[str] = Counter()
    for ms in per_round:
        mse_extra.update({k: (ms["mse"][k] - ms["kl"][k]) / rounds for k in ms["mse"] | ms["kl"]})
    lines.append("operators the block MSE adds most (mse - kl, each round; then kl+kept - kl):")
    for op, _ in sorted(mse_extra.items(), key=lambda kv: -abs(kv[1]))[:8]:
        added = " ".join(f"{ms['mse'][op] - ms['kl'][op]:+6.2f}" for ms in per_round)
        kept = " ".join(f"{ms['kl+kept'][op] - ms['kl'][op]:+6.2f}" for ms in per_round)
        lines.append(f"  {op:32s} mse - kl {added}   kl+kept - kl {kept}")
    return lines


if __name__ == "__main__":
    measure_then_emit(measure, sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None)
