"""ImageNet classification: dense evaluation, then each model x method x sparsity, one record per run.

    python -m tasks.imagenet --all-methods                      # the paper's grid for --models, then the extras
    python -m tasks.imagenet --models efficientnet_lite0 --methods fcpts --sparsity 0.7 --profile cpu

Data: ImageNet's folder layout, `<dir>/{train,val}/<wnid>/*.JPEG` (train/ calibrates, val/ evaluates), `<dir>` =
`<data-root>/imagenet` or the data root; a class's index is its wnid's position in `classes.txt` (`<wnid>[\t<name>]`
a line), else among train/'s sorted wnids, so labels stay right when val/ holds only some classes. Models, weights and
preprocessing from torchvision/timm (tasks/imagenet/models.py), `--weights PATH` a local state dict. Training-loop
methods calibrate with the released code's weak augmentation, POT and magnitude with the evaluation transform.
Profiles: `paper` (a GPU protocol), `cpu` (a 2-core CPU's budget), `quick` (smoke test, not a result).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch
from PIL import Image
from torch import nn
from torch.utils.data import Dataset, Subset

from fcpts.methods import training_methods
from tasks.grid import cli, layout
from tasks.grid.evaluate import classify_dataset
from tasks.grid.imagenet_catalogue import MODELS, PAPER_CNNS, PAPER_VITS, get_spec
from tasks.grid.paths import ENV_DATA_ROOT, DataNotFoundError, calibration_subset, resolve_data_root
from tasks.grid.profiles import Profile, cpu_profile, paper_profile, profile_table, quick_profile
from tasks.grid.rerun import register_task
from tasks.grid.runner import Grid, Where, dense_factory
from tasks.imagenet import COMMAND
from tasks.imagenet.models import architecture, preprocessing, pretrained

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
IMAGENET_DATA = "ImageNet (imagenet/ or the folder itself with train/<wnid>/ and val/<wnid>/)"


def imagenet_dir(root: Path) -> Path:
    for candidate in (root / "imagenet", root):
        if (candidate / "val").is_dir() or (candidate / "train").is_dir():
            return candidate
    raise DataNotFoundError(
        f"no ImageNet under {root}: expected {root / 'imagenet'}/ or {root}/ with train/<wnid>/ and "
        f"val/<wnid>/ image folders. Pass --data-root DIR (or set {ENV_DATA_ROOT}) to your ImageNet folder; "
        "val/ must be sorted into class folders (e.g. with the common valprep.sh)."
    )


def class_index(folder: Path) -> dict[str, int]:
    listing = folder / "classes.txt"
    if listing.is_file():
        wnids = [line.split("\t")[0].strip() for line in listing.read_text().splitlines() if line.strip()]
    else:
        train = folder / "train"
        wnids = sorted(p.name for p in train.iterdir() if p.is_dir()) if train.is_dir() else []
    if len(wnids) != 1000:
        raise DataNotFoundError(
            f"cannot number ImageNet's classes from {folder}: found {len(wnids)} wnids (in classes.txt or "
            "train/), need 1,000. Add a classes.txt listing the 1,000 wnids in sorted order."
        )
    return {w: i for i, w in enumerate(wnids)}


def list_split(folder: Path, split: str) -> list[tuple[Path, int]]:
    """Sorted (path, class index) pairs of one split."""
    split_dir = folder / split
    if not split_dir.is_dir():
        raise DataNotFoundError(f"ImageNet {split} split not found: {split_dir}/ does not exist")
    index = class_index(folder)
    samples = []
    for class_dir in sorted(p for p in split_dir.iterdir() if p.is_dir()):
        if class_dir.name not in index:
            raise DataNotFoundError(f"{class_dir} is not an ImageNet class folder (unknown wnid {class_dir.name!r})")
        samples += [
            (f, index[class_dir.name]) for f in sorted(class_dir.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES
        ]
    if not samples:
        raise DataNotFoundError(f"no images in {split_dir}/<wnid>/ (looked for {sorted(IMAGE_SUFFIXES)})")
    return samples


class ImageFiles(Dataset):
    """Images of `samples` through `transform`; yields (tensor, label). Decoded files stay cached
    (calibration sets are small and re-read every epoch)."""

    def __init__(self, samples: list[tuple[Path, int]], transform, cache: bool = False):
        self.samples, self.transform, self.cache = samples, transform, cache
        self._decoded: dict[int, Image.Image] = {}

    def __len__(self) -> int:
        return len(self.samples)

    def image(self, i: int) -> Image.Image:
        if i in self._decoded:
            return self._decoded[i]
        path = self.samples[i][0]
        try:
            with Image.open(path) as im:
                img = im.convert("RGB")
        except OSError as e:
            raise ValueError(f"cannot read image {path}: {e}") from e
        if self.cache:
            self._decoded[i] = img
        return img

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.image(i)), self.samples[i][1]


# The CPU budget's 8x fewer steps want a larger weight lr than the released 0.005 (docs/notebook/beyond-the-paper.md).
CPU_METHODS = {m: {"options": {"lr": 0.02}} for m in training_methods()}
CPU_METHODS["fcpts-plus"] = {"options": {"lr": 0.02, "ramp": 0.0, "erk_power": 0.5, "block_weight": 1.0}}

PROFILES = profile_table(
    paper_profile(),
    cpu_profile("cpu", 1000, iterations=200, batch_size=32, pot_iterations=1000, methods=CPU_METHODS).with_note(
        "2-core CPU budget: 1,000 images, 200 iterations of 32 for the training-loop methods "
        "(weights' SGD lr 0.02 for all of them; FCPTS+ without its ramp, ERK exponent 0.5, block weight 1), POT 1,000 "
        "iterations per layer on the same images; not the paper's protocol"
    ),
    quick_profile(32, iterations=3, batch_size=8, eval_limit=64, pot_iterations=3),
)


def all_methods(model: str) -> list[str]:
    """What `--all-methods` runs: the registry's methods of Table 3 (CNNs) or Table 4 (ViTs), the paper's first."""
    return layout.all_methods("imagenet-vit" if model in PAPER_VITS else "imagenet-cnn")


def paper_sparsities(model: str) -> list[float]:
    return [0.5, 0.6, 0.7] if model in PAPER_VITS else [0.5, 0.6, 0.7, 0.8, 0.9]


def dataset_name(n_val: int) -> str:
    """A partial validation set is named by its size, so its results never pass for full ImageNet's."""
    return "imagenet" if n_val == 50000 else f"imagenet-val{n_val}"


def planned_dataset(where: Where) -> tuple[str, str]:
    """The dataset a dry run lists the cells under (named by the val folder's size) and its note."""
    try:
        folder = imagenet_dir(resolve_data_root(where.data_root, holding=IMAGENET_DATA))
    except DataNotFoundError as e:
        return dataset_name(50000), cli.assumed_dataset(dataset_name(50000), e)
    return dataset_name(len(list_split(folder, "val"))), ""


def build_grid(*, model_name: str, profile: Profile, where: Where, workers: int | None = None) -> Grid:
    """The ImageNet grid of one model: its library's weights and preprocessing, train/ calibration, val/ metrics."""
    folder = imagenet_dir(resolve_data_root(where.data_root, holding=IMAGENET_DATA))
    train, val = list_split(folder, "train"), list_split(folder, "val")
    dense, weights_info = pretrained(model_name, where.weights)
    eval_tf, calib_tf, preprocessing_info = preprocessing(model_name, dense)

    def make_calibration(n: int, augment: bool):
        augmentation = "random-resized-crop+flip" if augment else "none (eval transform)"
        idx, info = calibration_subset(len(train), n, where.seed, "train", augmentation)
        info["files"] = [str(train[i][0].relative_to(folder)) for i in idx]
        return Subset(ImageFiles(train, calib_tf if augment else eval_tf, cache=True), idx), info

    val_set = ImageFiles(val[: profile.eval_limit] if profile.eval_limit else val, eval_tf)
    spec = get_spec(model_name)
    return Grid(
        task="imagenet",
        dataset=dataset_name(len(val)),
        model=model_name,
        build_model=dense_factory(lambda: architecture(model_name), dense, where.device),
        make_calibration=make_calibration,
        evaluate=lambda m: classify_dataset(m, val_set, workers=workers),
        profile=profile,
        provenance={
            "weights": weights_info,
            "substitute": spec.substitute,
            "model_source": f"{spec.library}:{spec.arch}",
            "preprocessing": preprocessing_info,
            "data": {"root": str(folder), "eval_split": "val", "n_eval": len(val_set), "n_train_available": len(train)},
        },
        **where.grid_fields(),
    )


def dense_model(record: dict) -> tuple[nn.Module, tuple[int, ...]]:
    """A record's dense model (its weights file, or the library's weights fetched by name) and input shape."""
    w = record.get("weights", {})
    path = w.get("path") if w.get("source") == "file" else None
    model, _ = pretrained(record["model"], path)
    return model, (3, record["preprocessing"]["input_size"], record["preprocessing"]["input_size"])


def plans(args: argparse.Namespace):
    """The (grid, methods, targets) this command line asks for."""
    checked, models = [], PAPER_CNNS + PAPER_VITS if args.models == ["paper"] else args.models
    for model_name in models:  # every model's profile and options are checked before any cell runs
        get_spec(model_name)
        methods = all_methods(model_name) if args.all_methods else args.methods
        checked.append((model_name, methods, cli.profile_from_args(args, PROFILES, methods)))
    for model_name, methods, profile in checked:
        targets, where, note = args.sparsity or paper_sparsities(model_name), cli.where(args), ""
        if args.dry_run:
            dataset, note = planned_dataset(where)
            grid = cli.planned_grid("imagenet", dataset, model_name, profile, where)
        else:
            grid = build_grid(model_name=model_name, profile=profile, where=where, workers=args.workers)
        yield cli.GridPlan(grid, methods, targets, ("--models", model_name), note)


@register_task(
    "imagenet", build_grid=build_grid, dense_model=dense_model, command=COMMAND, plans=plans,
    datasets=("imagenet (the 50,000 val images)", "imagenet-val<N> (a subset of val)"), models=tuple(MODELS),
    metrics=("top1", "top5"), profiles=tuple(PROFILES),
)  # fmt: skip
def grid_for_record(record: dict, profile: Profile, where: Where) -> Grid:
    """The grid a record came from (model, weights file when one was given, seed), for re-running its cell."""
    weights = record["weights"].get("path") if record["weights"].get("source") == "file" else None
    return build_grid(
        model_name=record["model"], profile=profile, where=replace(where, seed=record["seed"], weights=weights)
    )
