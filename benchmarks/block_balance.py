"""What `fcpts-plus`'s `block_weight="auto"` chooses on each cell of the task grids: the output KL's and the blocks'
MSE gradient norms at the first step, with the cells' own calibration images, batches and start (the task
profile's options for fcpts-plus), and the weight that makes the blocks' gradient `block_balance` times the KL's.

No training to speak of: each cell runs the method for two iterations, which starts from the same masks as the
full run (the ramp's first level) and measures on the same first calibration batches, so the weight printed is
the one the cell's full run chooses (where the profile fixes a weight instead, the one auto would choose).
Shows why one fixed block weight cannot fit every network: the blocks' gradient at weight 1 ranges from a
seventh of the KL's to several hundred times it.

    python -m benchmarks.block_balance --cifar-profile paper-cpu --imagenet-profile cpu
"""

from __future__ import annotations

import argparse
import logging
import time

from fcpts.methods import get_method
from tasks.cifar.grid import PROFILES as CIFAR_PROFILES
from tasks.cifar.grid import build_grid as cifar_grid
from tasks.grid.records import device_description, git_commit
from tasks.grid.runner import Where
from tasks.imagenet.grid import PROFILES as IMAGENET_PROFILES
from tasks.imagenet.grid import build_grid as imagenet_grid

CIFAR_CELLS = [(d, m) for d in ("cifar10", "cifar100") for m in ("resnet32", "resnet56")]
PROBE_ITERATIONS = 2  # with a ramp over half of them, step 0 sits at the ramp's first level, as in the full run


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cifar-profile", default="paper-cpu")
    p.add_argument("--cifar-sparsity", type=float, nargs="+", default=[0.7, 0.8, 0.9])
    p.add_argument("--imagenet-profile", default="cpu")
    p.add_argument("--imagenet-sparsity", type=float, nargs="*", default=[0.5, 0.6, 0.7, 0.8, 0.9])
    p.add_argument("--block-balance", type=float, default=1.0)
    p.add_argument("--data-root")
    args = p.parse_args(argv)

    logging.getLogger("fcpts").setLevel(logging.ERROR)  # two iterations end off target by design: no drift warning
    print(f"# commit {git_commit()}, {device_description()}, block_balance {args.block_balance}")
    where = Where(data_root=args.data_root, progress=False)
    cifar = CIFAR_PROFILES[args.cifar_profile]
    grids = [cifar_grid(dataset=d, model=m, profile=cifar, where=where) for d, m in CIFAR_CELLS]
    cells = [(g, s) for g in grids for s in args.cifar_sparsity]
    if args.imagenet_sparsity:
        profile = IMAGENET_PROFILES[args.imagenet_profile]
        lite0 = imagenet_grid(model_name="efficientnet_lite0", profile=profile, where=where)
        cells += [(lite0, s) for s in args.imagenet_sparsity]
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
