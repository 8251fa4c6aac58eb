"""The cells a per-cell probe benchmark walks: every CIFAR Table 2 cell and the Lite0 stand-in's sparsities, each as
(grid, target) with the task's own profile, images and seed. Shared by the benchmarks that show what an automatic
choice of `fcpts-plus` picks on each cell (erk_choice, block_balance)."""

from __future__ import annotations

import argparse

from tasks.cifar.grid import PROFILES as CIFAR_PROFILES
from tasks.cifar.grid import build_grid as cifar_grid
from tasks.grid.runner import Grid, Where
from tasks.imagenet.grid import PROFILES as IMAGENET_PROFILES
from tasks.imagenet.grid import build_grid as imagenet_grid

CIFAR_CELLS = [(d, m) for d in ("cifar10", "cifar100") for m in ("resnet32", "resnet56")]


def add_cell_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cifar-profile", default="paper-cpu")
    p.add_argument("--cifar-sparsity", type=float, nargs="+", default=[0.7, 0.8, 0.9])
    p.add_argument("--imagenet-profile", default="cpu")
    p.add_argument("--imagenet-sparsity", type=float, nargs="*", default=[0.5, 0.6, 0.7, 0.8, 0.9])
    p.add_argument("--data-root")


def task_cells(args: argparse.Namespace) -> list[tuple[Grid, float]]:
    """(grid, target) for every CIFAR cell, then every Lite0 sparsity (none with an empty --imagenet-sparsity)."""
    where = Where(data_root=args.data_root, progress=False)
    cifar = CIFAR_PROFILES[args.cifar_profile]
    grids = [cifar_grid(dataset=d, model=m, profile=cifar, where=where) for d, m in CIFAR_CELLS]
    cells = [(g, s) for g in grids for s in args.cifar_sparsity]
    if args.imagenet_sparsity:
        profile = IMAGENET_PROFILES[args.imagenet_profile]
        lite0 = imagenet_grid(model_name="efficientnet_lite0", profile=profile, where=where)
        cells += [(lite0, s) for s in args.imagenet_sparsity]
    return cells
