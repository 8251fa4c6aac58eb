"""PASCAL VOC detection (the paper's Table 5): dense VOC07 mAP, then each detector x method x sparsity.

    python -m tasks.voc --all-methods --data-root DIR            # mb1-ssd and mb2-ssd-lite at 90%, VOC2007 test
    python -m tasks.voc --data-root data/voc-cifar --models mb2-ssd-lite --image-size 160 --all-methods
                                                                 # the CPU substitute (tasks.voc.make_set)

Detectors: pytorch-ssd's (tasks/voc/ssd.py); weights `--weights PATH`, else its released files in
`<data-root>/weights/voc/` or `<data-root>/models/`, for a substitute set `results/weights/<dataset>/<model>-<size>.pth`
(tasks.voc.train). Calibration images from `trainval` (no boxes); VOC07 11-point mAP@0.5 on `test`.
The methods see the detector's per-prior class log-probabilities at T = 4 (`DistillView`); box offsets and by
default the rest of the network enter through FCPTS's block MSE (`--reconstruction`):
  kl-box      KL(class distributions) + MSE on the regression-header outputs (the box offsets)
  mse-heads   kl-box + MSE on the classification-header outputs (MSE on all head outputs)
  mse-blocks  mse-heads + MSE on every backbone block and extra layer (default)
A non-default reconstruction names the profile (e.g. `cpu-kl-box`). Profiles: `paper` (a GPU protocol), `cpu`,
`quick` (smoke test, not a result).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

import torch

from fcpts.methods import get_method, list_methods
from tasks.grid import cli
from tasks.grid.evaluate import evaluation_loader
from tasks.grid.paths import RESULTS_DIR, DataNotFoundError, calibration_subset, resolve_data_root
from tasks.grid.profiles import Profile, cpu_profile, paper_profile, profile_table, quick_profile
from tasks.grid.rerun import get_task, register_task
from tasks.grid.runner import Column, Grid, Where, dense_factory, format_table, result_columns
from tasks.voc import COMMAND
from tasks.voc.data import (
    DetectionImages,
    VOCDetection,
    read_image_ids,
    read_substitute_manifest,
    voc2007_dir,
)
from tasks.voc.make_set import make_set
from tasks.voc.metrics import voc07_map
from tasks.voc.ssd import (
    ARCHITECTURES,
    RECONSTRUCTIONS,
    RELEASED,
    DistillView,
    SSDConfig,
    create_ssd,
    load_ssd_weights,
    postprocess,
    reconstruction_blocks,
)

VOC07_TEST_IMAGES = 4952
VOC_DATA = "VOCdevkit/VOC2007 (or a substitute set)"
PROFILES = profile_table(  # shared by the mmdet detectors' driver: the same budget for every method and detector
    paper_profile("trainval"),
    cpu_profile("cpu", 1024, iterations=400, batch_size=32, pot_iterations=1000).with_note(
        "CPU budget: 1,024 trainval images, 400 iterations of 32 for the training-loop methods, "
        "POT 1,000 iterations per layer on the same images; not the paper's protocol"
    ),
    quick_profile(8, iterations=2, batch_size=4, eval_limit=8, pot_iterations=2),
)


def distill_profile(profile: Profile, blocks: list[str], reconstruction: str) -> Profile:
    """The profile the distilling methods run with on one detector: block MSE over its `blocks`; a non-default
    reconstruction renames the profile, so its records never pass for the default's."""
    default = reconstruction == "mse-blocks" or profile.name.endswith(f"-{reconstruction}")
    methods = dict(profile.methods)
    for m in list_methods(trains=True):
        if "block_names" in get_method(m).options.field_names():  # the methods that distill block outputs
            methods[m] = {"options": {"reconstruction": "mse-blocks", "block_names": blocks}}
    return replace(
        profile,
        name=profile.name + ("" if default else f"-{reconstruction}"),
        methods=methods,
        note=f"{profile.note}; reconstruction {reconstruction}: {RECONSTRUCTIONS[reconstruction]}",
    )


@torch.inference_mode()
def evaluate_detector(
    model: torch.nn.Module,
    data: VOCDetection,
    images: DetectionImages,
    config: SSDConfig,
    batch_size: int = 32,
    workers: int | None = None,
) -> dict:
    """VOC07 mAP@0.5 (%) of a detector (or its DistillView) on the images of `data` listed by `images`."""
    ssd: torch.nn.Module = model.ssd if isinstance(model, DistillView) else model
    was_training = ssd.training
    ssd.eval()
    device = next(ssd.parameters()).device
    priors = config.priors().to(device)
    detections = {}
    for x, idx in evaluation_loader(images, batch_size, workers, device):
        logits, regression = ssd(x.to(device, non_blocking=True))
        annotations = [(i, data.annotations[i]) for i in idx]
        sizes = [(a.height, a.width) if a.height and a.width else data.image(i).shape[-2:] for i, a in annotations]
        for i, det in zip(idx, postprocess(logits, regression, priors, config, sizes)):
            detections[data.ids[i]] = {k: v.cpu() for k, v in det.items()}
    ssd.train(was_training)
    result = voc07_map(detections, [data.annotations[i] for i in images.indices], data.class_names)
    return {
        "map50": result["map"],
        "ap50_per_class": result["ap"],
        "n_images": len(images),
        "n_detections": result["n_detections"],
        "n_gt_boxes": result["n_gt"],
        "metric": "VOC07 11-point AP at IoU > 0.5, difficult ignored",
    }


def default_weights(arch: str, image_size: int, data_root: Path, manifest: dict | None) -> Path:
    if manifest:
        candidates = [RESULTS_DIR / "weights" / manifest["dataset"] / f"{arch}-{image_size}.pth"]
        hint = f"train it with `python -m tasks.voc.train --data-root <set> --model {arch} --image-size {image_size}`"
    else:
        name = RELEASED[arch][0]
        candidates = [data_root / "weights" / "voc" / name, data_root / "models" / name]
        hint = (
            f"pytorch-ssd's released {name} (github.com/qfgaohao/pytorch-ssd, README's model links, "
            f"e.g. https://storage.googleapis.com/models-hao/{name})"
        )
    for c in candidates:
        if c.is_file():
            return c
    raise DataNotFoundError(
        f"no weights for {arch}: looked for {', '.join(map(str, candidates))}. Pass "
        f"--weights PATH, or put {hint} there."
    )


def model_name(arch: str, image_size: int) -> str:
    return arch if image_size == 300 else f"{arch}-{image_size}"


def dataset_name(folder: Path, eval_limit: int | None) -> str:
    """voc2007 or the substitute set's name; a partial test set is named by its size."""
    manifest = read_substitute_manifest(folder)  # its dataset name checked: it names the records' folder
    base = manifest["dataset"] if manifest else "voc2007"
    n_test_all = len(read_image_ids(folder, "test"))
    n_test = min(eval_limit, n_test_all) if eval_limit else n_test_all
    full = n_test == n_test_all and (manifest is not None or n_test_all == VOC07_TEST_IMAGES)
    return base if full else f"{base}-test{n_test}"


def build_grid(
    *,
    arch: str,
    profile: Profile,
    where: Where,
    image_size: int = 300,
    reconstruction: str = "mse-blocks",
    workers: int | None = None,
) -> Grid:
    """The detection grid of one detector on a VOC-layout folder (the real VOC2007 or a substitute set)."""
    data_root_path = resolve_data_root(where.data_root, holding=VOC_DATA)
    folder = voc2007_dir(data_root_path)
    test = VOCDetection(folder, "test", limit=profile.eval_limit)
    trainval = VOCDetection(folder, "trainval")
    manifest = test.manifest
    substitute = manifest is not None
    probe = create_ssd(arch, len(test.class_names))
    profile = distill_profile(profile, reconstruction_blocks(probe, reconstruction), reconstruction)
    weights_path = Path(where.weights) if where.weights else default_weights(arch, image_size, data_root_path, manifest)
    weights = load_ssd_weights(probe, weights_path)
    config = SSDConfig.for_model(probe, image_size)
    build_view = dense_factory(
        lambda: DistillView(create_ssd(arch, len(test.class_names))), DistillView(probe), where.device
    )

    def make_calibration(n: int, augment: bool):
        idx, info = calibration_subset(
            len(trainval), n, where.seed, "trainval", "horizontal flip" if augment else "none"
        )
        info.update(image_ids=[trainval.ids[i] for i in idx], labels_used=False)
        return DetectionImages(trainval, image_size, idx, flip=augment), info

    eval_images = DetectionImages(test, image_size)
    return Grid(
        task="voc",
        dataset=dataset_name(folder, profile.eval_limit),
        model=model_name(arch, image_size),
        build_model=build_view,
        make_calibration=make_calibration,
        evaluate=lambda m: evaluate_detector(m, test, eval_images, config, workers=workers),
        profile=profile,
        provenance={
            "weights": weights,
            "substitute": substitute,
            "substitute_manifest": manifest,
            "paper_dense_map": None if substitute else RELEASED[arch][1],
            "ssd_config": asdict(config),
            "reconstruction": reconstruction,
            "data": {
                "root": str(folder),
                "eval_split": "test",
                "n_eval": len(test),
                "n_trainval": len(trainval),
                "classes": list(test.class_names),
            },
        },
        metric_names=("map50",),
        **where.grid_fields(),
    )


VOC_COLUMNS = [Column("model", "18s", lambda r: r["model"]), *result_columns({"map50": "mAP"}, method_width=14)]


def plans(args: argparse.Namespace):
    """The (grid, methods, targets) this command line asks for."""
    profile = cli.profile_from_args(args, PROFILES, args.methods)
    where = cli.where(args)
    for arch in args.models:
        if not args.dry_run:
            grid = build_grid(
                arch=arch,
                profile=profile,
                image_size=args.image_size,
                reconstruction=args.reconstruction,
                workers=args.workers,
                where=where,
            )
            yield cli.GridPlan(grid, args.methods, args.sparsity, ("--models", arch))
            continue
        note = ""  # a dry run: the dataset named from the folder when it is here (else VOC2007, said so)
        try:
            dataset = dataset_name(
                voc2007_dir(resolve_data_root(where.data_root, holding=VOC_DATA)), profile.eval_limit
            )
        except DataNotFoundError as e:
            dataset, note = "voc2007", cli.assumed_dataset("voc2007", e)
        planned = distill_profile(profile, [], args.reconstruction)
        grid = cli.planned_grid("voc", dataset, model_name(arch, args.image_size), planned, where)
        yield cli.GridPlan(grid, args.methods, args.sparsity, ("--models", arch), note)


@register_task(
    "voc", build_grid=build_grid, make_data=make_set, command=COMMAND, plans=plans,
    datasets=("voc2007", "voc-cifar10 (the substitute set, tasks.voc.make_set)"),
    models=(*ARCHITECTURES, "mmdet-<config> (--framework mmdet)"), metrics=("map50",), profiles=tuple(PROFILES),
    table=partial(format_table, columns=VOC_COLUMNS),
)  # fmt: skip
def grid_for_record(record: dict, profile: Profile, where: Where) -> Grid:
    """The grid a record came from, for re-running its cell (mmdet records: tasks.voc.mmdet's)."""
    if record.get("framework") == "mmdet":
        return get_task("coco").grid_for_record(record, profile, where)
    image_size = record["ssd_config"]["image_size"]
    arch, reconstruction = record["model"].removesuffix(f"-{image_size}"), record.get("reconstruction", "mse-blocks")
    where = replace(where, seed=record["seed"], weights=record["weights"]["path"])
    return build_grid(arch=arch, profile=profile, where=where, image_size=image_size, reconstruction=reconstruction)
