"""Benchmark: time of one FCPTS optimisation step over one plain training step (same model, batch).

Both are medians over many steps (after 3 warm-up steps), measured in this one process on the same inputs, in
the same memory format (FCPTS runs in channels_last by default; the plain step is timed in that format too, and
both again in NCHW). The FCPTS step time comes from the per-step times that `fcpts.sparsify` records in its
report; it includes the teacher forward, the masked student forward/backward, the bridge/control loss and the
optimiser step. The plain step is forward + cross-entropy + backward + SGD step in train mode.

    python -m benchmarks.step_time --model resnet56 --batch-size 64
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F

import fcpts
from tasks.cifar.models import cifar_resnet


def plain_step_time(model, x, y, steps: int, channels_last: bool) -> float:
    """Median wall time of a plain SGD training step (forward, cross-entropy, backward, update)."""
    model = copy.deepcopy(model).train()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=3e-4)
    times = []
    for i in range(steps + 3):
        t = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= 3:  # warm-up
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def fcpts_step_time(model, x, steps: int, **options) -> float:
    """Median wall time of one FCPTS step, from the per-step times in the report's history (each step
    includes fetching the batch, the teacher forward, the masked student, losses and the update)."""
    _, report = fcpts.sparsify(
        copy.deepcopy(model), x, 0.9, iterations=steps + 3, batch_size=len(x), progress=False, **options
    )
    return statistics.median(h["step_s"] for h in report.history[3:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet56")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = cifar_resnet(args.model)
    x = torch.randn(args.batch_size, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch_size,))
    print(
        f"model {args.model}, batch {args.batch_size}, {torch.get_num_threads()} threads, "
        f"{args.rounds} interleaved rounds of {args.steps} steps (ratios: median over rounds of same-round ratios)"
    )
    configs = [(cl, rec, mode) for cl in (True, False) for rec in ("mse-blocks", "kl") for mode in ("train", "eval")]
    plain = {True: [], False: []}
    fc = {c: [] for c in configs}
    for _ in range(args.rounds):  # interleave, so slow drifts of the machine hit every config alike
        for cl in (True, False):
            plain[cl].append(plain_step_time(model, x, y, args.steps, cl))
        for cl, rec, mode in configs:
            fc[(cl, rec, mode)].append(
                fcpts_step_time(model, x, args.steps, teacher_mode=mode, channels_last=cl, reconstruction=rec)
            )
    for cl in (True, False):
        fmt = "channels_last" if cl else "contiguous"
        print(f"plain training step, {fmt:13s}                        : {statistics.median(plain[cl]) * 1000:7.1f} ms")
        for c in [c for c in configs if c[0] == cl]:
            _, rec, mode = c
            ratio = statistics.median(f / p for f, p in zip(fc[c], plain[cl]))
            default = " (defaults)" if (rec, mode) == ("mse-blocks", "train") else ""
            label = f"fcpts step, {fmt:13s}, {rec:10s}, teacher {mode:5s}"
            print(f"{label}: {statistics.median(fc[c]) * 1000:7.1f} ms   ratio {ratio:.2f}{default}")


if __name__ == "__main__":
    main()
