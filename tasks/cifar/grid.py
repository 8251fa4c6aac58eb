"""CIFAR-10/100 classification: dense evaluation, then each method x sparsity, one record per run.

    python -m tasks.cifar --dataset cifar10 --models resnet56 --methods fcpts --sparsity 0.7 0.8 0.9

Calibration images come from the training split (a seeded subset, labels unused); accuracy is measured
on the test split. Profiles: `paper` (METHOD.md's protocol: 1,024 images, 1,600 iterations of batch 64),
`fast` (the same data, fewer iterations: minutes on a CPU), `quick` (tiny, for tests).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from tasks.cifar import COMMAND
from tasks.grid import cli
from tasks.grid.cifar_data import CIFAR_CLASSES, CIFAR_MEAN, CIFAR_STD, load_cifar, normalize_cifar
from tasks.grid.cifar_models import CIFAR_MODELS, cifar_resnet
from tasks.grid.evaluate import classify
from tasks.grid.paths import CIFAR_DATA, calibration_subset, resolve_data_root
from tasks.grid.profiles import Profile, cpu_profile, paper_profile, profile_table, quick_profile
from tasks.grid.rerun import register_task
from tasks.grid.runner import Grid, Where, dense_factory
from tasks.grid.weights import default_cifar_weights, load_checkpoint

PROFILES = profile_table(
    paper_profile(),
    cpu_profile("paper-cpu", 1024, iterations=1600, batch_size=64, pot_iterations=1000).with_note(
        "paper protocol with POT cut to 1,000 iterations per layer on the same 1,024 "
        "images as FCPTS (CPU budget); compare times only within this profile"
    ),
    cpu_profile("fast", 1024, iterations=400, batch_size=64, pot_iterations=500).with_note(
        "paper data, a quarter of the FCPTS iterations, POT 500 per layer: the CPU default"
    ),
    quick_profile(128, iterations=10, batch_size=32, eval_limit=1000, pot_iterations=5),
)


class CifarCalibration(Dataset):
    """Calibration images (labels dropped), `augment=True`: pad-4 random crop and flip (the checkpoints' recipe)."""

    def __init__(self, x_uint8: np.ndarray, augment: bool = True):
        import torchvision.transforms.v2 as T

        self.images = torch.as_tensor(np.asarray(x_uint8)).permute(0, 3, 1, 2).contiguous()
        steps = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()] if augment else []
        self.transform = T.Compose(steps + [T.ToDtype(torch.float32, scale=True), T.Normalize(CIFAR_MEAN, CIFAR_STD)])

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(self.images[i])


def build_grid(*, dataset: str, model: str, profile: Profile, where: Where, download: bool = False) -> Grid:
    """The CIFAR grid of one model: dense weights, calibration subsets of the training split, test metrics."""
    root = resolve_data_root(where.data_root, not download, CIFAR_DATA)  # a download creates it
    x_test, y_test = load_cifar(root, dataset, "test", download)
    if profile.eval_limit:
        x_test, y_test = x_test[: profile.eval_limit], y_test[: profile.eval_limit]
    x_train, _ = load_cifar(root, dataset, "train", download)

    def make_calibration(n: int, augment: bool):
        idx, info = calibration_subset(len(x_train), n, where.seed, "train", "crop4+flip" if augment else "none")
        return CifarCalibration(x_train[idx], augment=augment), info

    weights_path = Path(where.weights) if where.weights else default_cifar_weights(root, dataset, model)
    num_classes = CIFAR_CLASSES[dataset]
    probe = cifar_resnet(model, num_classes)
    weights_info = load_checkpoint(probe, weights_path)  # fail early on a bad file
    x_eval, y_eval = normalize_cifar(x_test), torch.as_tensor(y_test)
    return Grid(
        task="cifar",
        dataset=dataset,
        model=model,
        build_model=dense_factory(lambda: cifar_resnet(model, num_classes), probe, where.device, weights_path),
        make_calibration=make_calibration,
        evaluate=lambda m: classify(m, x_eval, y_eval),
        profile=profile,
        provenance={"weights": weights_info, "data": {"root": str(root), "eval_split": "test", "n_eval": len(y_test)}},
        **where.grid_fields(),
    )


def dense_model(record: dict) -> tuple[nn.Module, tuple[int, ...]]:
    """A record's dense model and input shape: its weights path when it exists here, else this machine's default
    location for the same model (a clone elsewhere), accepted only with the record's sha256."""
    model = cifar_resnet(record["model"], num_classes=CIFAR_CLASSES[record["dataset"]])
    path = Path(record["weights"]["path"])
    if not path.is_file():
        path = default_cifar_weights(resolve_data_root(None), record["dataset"], record["model"])
    info = load_checkpoint(model, path)
    if info["sha256"] != record["weights"]["sha256"]:
        raise ValueError(
            f"dense weights {path} are not the ones the record started from (sha256 "
            f"{info['sha256'][:12]} vs {record['weights']['sha256'][:12]})"
        )
    return model, (3, 32, 32)


def plans(args: argparse.Namespace):
    """The (grid, methods, targets) this command line asks for."""
    profile, where = cli.profile_from_args(args, PROFILES, args.methods), cli.where(args)
    for model in args.models:
        if args.dry_run:  # the cells' names need no data
            grid = cli.planned_grid("cifar", args.dataset, model, profile, where)
        else:
            grid = build_grid(dataset=args.dataset, model=model, profile=profile, where=where, download=args.download)
        yield cli.GridPlan(grid, args.methods, args.sparsity, ("--models", model))


@register_task(
    "cifar", build_grid=build_grid, dense_model=dense_model, command=COMMAND, plans=plans,
    datasets=tuple(sorted(CIFAR_CLASSES)), models=tuple(sorted(CIFAR_MODELS)), metrics=("top1", "top5"),
    profiles=tuple(PROFILES),
)  # fmt: skip
def grid_for_record(record: dict, profile: Profile, where: Where) -> Grid:
    """The grid a record came from (its dataset, model, weights file and seed), for re-running its cell."""
    where = replace(where, seed=record["seed"], weights=record["weights"]["path"])
    return build_grid(dataset=record["dataset"], model=record["model"], profile=profile, where=where)
