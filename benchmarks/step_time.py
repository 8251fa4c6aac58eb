"""Benchmark: time of one FCPTS optimisation step over one plain training step (same model, batch).

Both are measured in this one process on the same inputs, in the same memory format (FCPTS runs in
channels_last by default; the plain step is timed in that format too, and both again in NCHW). The FCPTS step time is the slope of the
wall time of `fcpts.sparsify` between two iteration counts, so set-up and the exact-target step cancel
out; it includes the teacher forward, the masked student forward/backward, the bridge/control loss
and the optimiser step. The plain step is forward + cross-entropy + backward + SGD step in train mode.

    python -m benchmarks.step_time --model resnet56 --batch-size 64
"""
from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F

import fcpts
from tasks.models import cifar_resnet


def plain_step_time(model, x, y, steps: int, channels_last: bool) -> float:
    model = copy.deepcopy(model).train()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=3e-4)
    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    for _ in range(3):
        step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t) / steps


def fcpts_step_time(model, x, steps: int, **options) -> float:
    def run(iterations: int) -> float:
        m = copy.deepcopy(model)
        t = time.perf_counter()
        fcpts.sparsify(m, x, 0.9, iterations=iterations, batch_size=len(x), progress=False, **options)
        return time.perf_counter() - t
    run(2)  # warm-up
    return (run(3 + steps) - run(3)) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet56")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = cifar_resnet(args.model)
    x = torch.randn(args.batch_size, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch_size,))
    print(f"model {args.model}, batch {args.batch_size}, {torch.get_num_threads()} threads")
    for cl in (True, False):
        fmt = "channels_last" if cl else "contiguous"
        plain = plain_step_time(model, x, y, args.steps, cl)
        print(f"plain training step, {fmt:13s}                        : {plain * 1000:7.1f} ms")
        for rec in ("mse-blocks", "kl"):
            for mode in ("train", "eval"):
                default = " (defaults)" if (rec, mode) == ("mse-blocks", "train") else ""
                t = fcpts_step_time(model, x, args.steps, teacher_mode=mode, channels_last=cl, reconstruction=rec)
                label = f"fcpts step, {fmt:13s}, {rec:10s}, teacher {mode:5s}"
                print(f"{label}: {t * 1000:7.1f} ms   ratio {t / plain:.2f}{default}")

if __name__ == "__main__":
    main()
