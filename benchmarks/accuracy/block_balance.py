"""What `fcpts-plus`'s `block_weight="auto"` chooses on each cell of the task grids: the output KL's and the blocks'
MSE gradient norms at the first step, with the cells' own calibration images, batches and start (the task
profile's options for fcpts-plus), and the weight that makes the blocks' gradient `block_balance` times the KL's.

No training to speak of: each cell runs the method for two iterations, which starts from the same masks as the
full run (the ramp's first level) and measures on the same first calibration batches, so the weight printed is
the one the cell's full run chooses (where the profile fixes a weight instead, the one auto would choose).
Shows why one fixed block weight cannot fit every network: the blocks' gradient at weight 1 ranges from a
seventh of the KL's to several hundred times it.

    python -m benchmarks.accuracy.block_balance --cifar-profile paper-cpu --imagenet-profile cpu
"""

from __future__ import annotations

import argparse
import logging
import time

from benchmarks.accuracy.task_cells import add_cell_arguments, task_cells
from fcpts.methods import get_method
from tasks.grid.records import device_description, git_commit

PROBE_ITERATIONS = 2  # with a ramp over half of them, step 0 sits at the ramp's first level, as in the full run


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cell_arguments(p)
    p.add_argument("--block-balance", type=float, default=1.0)
    args = p.parse_args(argv)

    logging.getLogger("fcpts").setLevel(logging.ERROR)  # two iterations end off target by design: no drift warning
    print(f"# commit {git_commit()}, {device_description()}, block_balance {args.block_balance}")
    cells = task_cells(args)
    method = get_method("fcpts-plus")
    print(
        "| cell | profile | profile's other options | KL gradient | blocks' gradient at weight 1 "
        "| weight auto chooses | probe s |"
    )
    print("|---|---|---|---:|---:|---:|---:|")
    for grid, target in cells:
        data, _ = grid.make_calibration(grid.profile.n_calibration_for("fcpts-plus"), True)
        options = {k: v for k, v in (grid.profile.options_for("fcpts-plus") or {}).items() if k != "block_weight"}
        t = time.perf_counter()
        _, report = method(
            grid.build_model(),
            data,
            target,
            **{**options, "block_weight": "auto", "block_balance": args.block_balance},
            iterations=PROBE_ITERATIONS,
            batch_size=grid.profile.batch_size,
            seed=grid.seed,
            device="cpu",
            progress=False,
        )
        chosen = report.extra["block_weight"]
        print(
            f"| {grid.dataset} {grid.model} {target:.0%} | {grid.profile.name} | {options or '—'} | "
            f"{chosen['kl_grad_norm']:.4f} | {chosen['blocks_grad_norm']:.4f} | {chosen['chosen']:.4f} | "
            f"{time.perf_counter() - t:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
