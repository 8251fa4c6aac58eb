"""What `fcpts-plus`'s `erk_power="auto"` chooses on each cell of the task grids, with the cells' own calibration
images (the task's profile: image count, batch size, seed), and the one-shot KL of every exponent it weighs.

No training: one probe per cell (a few forward passes). Shows, before any long run, where "auto" starts from
FCPTS's ERK (exponent 1) and where it starts softer.

    python -m benchmarks.accuracy.erk_choice --cifar-profile paper-cpu --imagenet-profile cpu
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.accuracy.task_cells import add_cell_arguments, task_cells
from fcpts.core.calibration import Calibration
from fcpts.core.erk_choice import choose_erk_power
from fcpts.methods.fcpts_plus import FCPTSPlusOptions
from tasks.grid.records import device_description, git_commit


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cell_arguments(p)
    args = p.parse_args(argv)

    print(f"# commit {git_commit()}, {device_description()}")  # the description names the thread count
    opts = FCPTSPlusOptions()
    cells = task_cells(args)
    powers = opts.erk_powers
    print("| cell | profile | chosen | " + " | ".join(f"KL, exponent {q}" for q in powers) + " | probe s |")
    print("|---|---|---:|" + "---:|" * len(powers) + "---:|")
    for grid, target in cells:
        data, _ = grid.make_calibration(grid.profile.n_calibration_for("fcpts-plus"), True)
        calib = Calibration(data, grid.profile.batch_size, grid.seed)
        t = time.perf_counter()
        chosen, probe = choose_erk_power(
            grid.build_model(), opts.layers, calib, target, powers, opts.probe_images, torch.device("cpu")
        )
        kls = " | ".join(f"{probe['one_shot_kl'][str(q)]:.4f}" for q in powers)
        print(
            f"| {grid.dataset} {grid.model} {target:.0%} | {grid.profile.name} | {chosen} | {kls} | "
            f"{time.perf_counter() - t:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
