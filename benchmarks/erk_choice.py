"""What `fcpts-plus`'s `erk_power="auto"` chooses on each cell of the task grids, with the cells' own calibration
images (the task's profile: image count, batch size, seed), and the one-shot KL of every exponent it weighs.

No training: one probe per cell (a few forward passes). Shows, before any long run, where "auto" starts from
FCPTS's ERK (exponent 1) and where it starts softer.

    python -m benchmarks.erk_choice --cifar-profile paper-cpu --imagenet-profile cpu
"""

from __future__ import annotations

import argparse
import time

import torch

from fcpts.core.calibration import Calibration
from fcpts.core.erk_choice import choose_erk_power
from fcpts.methods.fcpts_plus import FCPTSPlusOptions
from tasks.cifar.grid import PROFILES as CIFAR_PROFILES
from tasks.cifar.grid import build_grid as cifar_grid
from tasks.grid.records import device_description, git_commit
from tasks.grid.runner import Where
from tasks.imagenet.grid import PROFILES as IMAGENET_PROFILES
from tasks.imagenet.grid import build_grid as imagenet_grid

CIFAR_CELLS = [(d, m) for d in ("cifar10", "cifar100") for m in ("resnet32", "resnet56")]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cifar-profile", default="paper-cpu")
    p.add_argument("--cifar-sparsity", type=float, nargs="+", default=[0.7, 0.8, 0.9])
    p.add_argument("--imagenet-profile", default="cpu")
    p.add_argument("--imagenet-sparsity", type=float, nargs="*", default=[0.5, 0.6, 0.7, 0.8, 0.9])
    p.add_argument("--data-root")
    args = p.parse_args(argv)

    print(f"# commit {git_commit()}, {device_description()}")  # the description names the thread count
    opts = FCPTSPlusOptions()
    where = Where(data_root=args.data_root, progress=False)
    cifar = CIFAR_PROFILES[args.cifar_profile]
    grids = [cifar_grid(dataset=d, model=m, profile=cifar, where=where) for d, m in CIFAR_CELLS]
    cells = [(g, s) for g in grids for s in args.cifar_sparsity]
    if args.imagenet_sparsity:
        profile = IMAGENET_PROFILES[args.imagenet_profile]
        lite0 = imagenet_grid(model_name="efficientnet_lite0", profile=profile, where=where)
        cells += [(lite0, s) for s in args.imagenet_sparsity]
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
