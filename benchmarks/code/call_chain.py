"""Benchmark: the call chain from a task's command to the first mask a method computes, measured, not read.

A newcomer following `--sparsity` through the code walks this chain: the frames of the suite's own files on the
stack when a method first asks for keep masks (`fcpts.core.allocation`'s mask functions, or `apply_keep_masks`),
from the task's `main` down; and counts how often the target is checked on the way (a number made a `Sparsity`:
`check_target` passes one already checked on as it is). It runs
one cell of `python -m tasks.cifar` (ResNet-20, `quick` profile) on a data root given (random stand-ins do: only
the path through the code is measured) and prints each frame.

    python -m benchmarks.code.call_chain --data-root DIR --method fcpts
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tasks.grid.paths import REPO_ROOT

MASK_FUNCTIONS = {"global_keep_masks", "keep_masks_for_rates", "apply_keep_masks"}
SUITE = tuple(str(REPO_ROOT / part) for part in ("fcpts", "baselines", "tasks", "benchmarks"))


def chain(method: str, data_root: Path) -> tuple[list[str], int]:
    """`file:function` of each of the suite's frames, outermost first, when `method`'s cell first computes masks;
    and how many times the cell checked a target (`fcpts.core.masks._real_target`: a number made a `Sparsity`)."""
    from tasks.grid.cli import main as task_main

    found: list[str] = []
    checks = [0]

    def watch(frame, event, _arg):
        if event == "call" and frame.f_code.co_name == "_real_target":
            checks[0] += 1
        if found or event != "call" or frame.f_code.co_name not in MASK_FUNCTIONS:
            return
        if not frame.f_code.co_filename.startswith(str(REPO_ROOT / "fcpts" / "core")):
            return
        stack = []
        while frame is not None:
            if frame.f_code.co_filename.startswith(SUITE):
                rel = Path(frame.f_code.co_filename).relative_to(REPO_ROOT)
                stack.append(f"{rel}:{frame.f_code.co_name}")
            frame = frame.f_back
        found.extend(reversed(stack))

    with tempfile.TemporaryDirectory() as out:
        argv = ["--dataset", "cifar10", "--model", "resnet20", "--methods", method, "--sparsity", "0.5"]
        argv += ["--profile", "quick", "--data-root", str(data_root), "--results-dir", out, "--device", "cpu"]
        sys.setprofile(watch)
        try:
            status = task_main("cifar", [*argv, "--no-progress"])
        finally:
            sys.setprofile(None)
    if status != 0 or not found:
        raise RuntimeError(f"the {method} cell exited with status {status}" + ("" if found else ", no masks computed"))
    start = found.index("tasks/grid/cli.py:main")  # the task's command
    return found[start:], checks[0]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-root", required=True, help="a data root with CIFAR-10 and ResNet-20 weights")
    p.add_argument("--method", default="fcpts")
    args = p.parse_args(argv)
    frames, checks = chain(args.method, Path(args.data_root))
    files = {f.split(":")[0] for f in frames}
    print(f"{args.method}: {len(frames)} calls over {len(files)} files from the command to the first mask;")
    print(f"the target checked {checks} times in the cell")
    for f in frames:
        print("  " + f)


if __name__ == "__main__":
    main()
