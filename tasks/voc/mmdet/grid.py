"""The detection grid on an mmdet detector: the user's config and checkpoint, any registered method, mmdet's metric.

    python -m tasks.voc --framework mmdet --config CONFIG --weights FILE --data-root DIR --all-methods
    python -m tasks.voc.mmdet ...                                      (the same)

The detector is built by mmengine's registry from the config, its checkpoint loaded strictly. Calibration images:
the folder's trainval (VOC) or train* (COCO) split through the config's test pipeline without annotations. The
methods see `HeadOutputView` (detector.py), every Conv2d/Linear is pruned, head included; `--reconstruction` as in
the suite's SSD task. Metric: mmdet's VOCMetric (VOC07 11-point mAP@0.5) or CocoMetric. Records go to
`results/runs/<voc|coco>/<dataset>/mmdet-<config name>/`.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import cast

from torch import nn

from tasks.grid import cli
from tasks.grid.paths import RESULTS_DIR, DataNotFoundError, calibration_subset, resolve_data_root
from tasks.grid.profiles import Profile
from tasks.grid.rerun import register_task
from tasks.grid.runner import Grid, Where, dense_factory, result_columns
from tasks.grid.runner import format_table as grid_table
from tasks.voc.grid import PROFILES, distill_profile
from tasks.voc.mmdet import COMMAND
from tasks.voc.mmdet.data import (
    Layout,
    PipelineImages,
    build_dataset,
    config_test_pipeline,
    evaluate_detector,
    find_layout,
)
from tasks.voc.mmdet.detector import (
    HeadOutputView,
    build_detector,
    check_layers_reach_outputs,
    load_config,
    load_weights,
    mmdet_identity,
    pruned_layers,
    reconstruction_blocks,
)

LAYOUTS = "a VOC- or COCO-layout dataset"


def model_name(config: str | Path) -> str:
    return f"mmdet-{Path(config).stem}"


def dataset_name(layout: Layout, n_eval: int, limit: int | None) -> str:
    """The substitute set's name, voc2007 or coco-<split>; a partial evaluation is named by its size."""
    if layout.kind == "voc":
        base = layout.manifest["dataset"] if layout.manifest else "voc2007"
    else:
        base = f"coco-{layout.eval_split}"
    return base if limit is None or limit >= n_eval else f"{base}-test{min(limit, n_eval)}"


def build_grid(
    *, config: str | Path, profile: Profile, where: Where, reconstruction: str = "mse-blocks",
    workers: int | None = None, eval_batch_size: int = 16
) -> Grid:  # fmt: skip
    """The grid of one mmdet detector (config + checkpoint) on a VOC- or COCO-layout folder."""
    cfg = load_config(config)
    layout = find_layout(resolve_data_root(where.data_root, holding=LAYOUTS))
    pipeline = config_test_pipeline(cfg)
    n_eval_all = len(build_dataset(layout, layout.eval_split, pipeline))
    n_eval = n_eval_all if profile.eval_limit is None else min(profile.eval_limit, n_eval_all)  # mmengine's first N
    calibration_set = build_dataset(layout, layout.calibration_split, pipeline)
    dataset = dataset_name(layout, n_eval_all, profile.eval_limit)
    model = model_name(config)

    probe_view = HeadOutputView(build_detector(cfg))
    probe, classes = probe_view.detector, probe_view.detector.bbox_head.num_classes
    if classes != len(layout.classes):
        raise ValueError(
            f"the config's head has {classes} classes, the data at {layout.root} {len(layout.classes)} "
            f"({', '.join(layout.classes[:5])}, ...): set model.bbox_head.num_classes in the config"
        )
    check_layers_reach_outputs(probe_view)  # FCOS's centerness: refused before any work
    checkpoint = Path(where.weights or RESULTS_DIR / "weights" / dataset_name(layout, 0, None) / f"{model}.pth")
    weights_info = load_weights(probe, checkpoint, model)

    profile = distill_profile(profile, reconstruction_blocks(probe_view, reconstruction), reconstruction)
    build_view = dense_factory(lambda: HeadOutputView(build_detector(cfg)), probe_view, where.device)

    def make_calibration(n: int, augment: bool):
        idx, info = calibration_subset(
            len(calibration_set), n, where.seed, layout.calibration_split, "horizontal flip" if augment else "none"
        )
        info.update(
            image_ids=[str(calibration_set.get_data_info(i)["img_id"]) for i in idx],
            labels_used=False,
            pipeline="config's test pipeline without annotation loading, then the detector's data preprocessor",
        )
        return PipelineImages(calibration_set, cast(nn.Module, probe.data_preprocessor), idx, flip=augment), info

    def evaluate(view) -> dict:
        detector = view.detector if isinstance(view, HeadOutputView) else view
        return evaluate_detector(
            detector, layout, pipeline, profile.eval_limit, batch_size=eval_batch_size, workers=workers
        )

    return Grid(
        task=layout.kind,
        dataset=dataset,
        model=model,
        build_model=build_view,
        make_calibration=make_calibration,
        evaluate=evaluate,
        profile=profile,
        provenance={
            "framework": "mmdet",
            "mmdet": mmdet_identity(config, cfg),
            "weights": weights_info,
            "pruned_layers": pruned_layers(probe_view),
            "substitute": layout.manifest is not None,
            "substitute_manifest": layout.manifest,
            "reconstruction": reconstruction,
            "data": {**layout.describe(), "n_eval": n_eval, "n_calibration_split": len(calibration_set)},
        },
        metric_names=("map50",) if layout.kind == "voc" else ("map", "map50"),
        **where.grid_fields(),
    )


format_table = partial(grid_table, columns=result_columns({"map50": "mAP50"}, method_width=14))


def plans(args: argparse.Namespace):
    profile = cli.profile_from_args(args, PROFILES, args.methods)
    if args.dry_run:  # without the data, listed as VOC2007's cells (said so); with it, named from it
        try:
            find_layout(resolve_data_root(args.data_root, holding=LAYOUTS))
        except DataNotFoundError as e:
            profile = distill_profile(profile, [], args.reconstruction)
            grid = cli.planned_grid("voc", "voc2007", model_name(args.config), profile, cli.where(args))
            yield cli.GridPlan(grid, args.methods, args.sparsity, note=cli.assumed_dataset("voc2007", e))
            return
    grid = build_grid(
        config=args.config,
        profile=profile,
        where=cli.where(args),
        reconstruction=args.reconstruction,
        workers=args.workers,
        eval_batch_size=args.eval_batch_size,
    )
    yield cli.GridPlan(grid, args.methods, args.sparsity)


@register_task(
    "coco", build_grid=build_grid, command=COMMAND, plans=plans, table=format_table,
    datasets=("coco-<split>", "a VOC-layout folder"), models=("mmdet-<config>: any single-stage mmdet detector",),
    metrics=("map", "map50"), profiles=tuple(PROFILES),
)  # fmt: skip
def grid_for_record(record: dict, profile: Profile, where: Where) -> Grid:
    """The grid an mmdet record came from, for re-running its cell (VOC records reach it through the
    detection driver's "voc" registration)."""
    where = replace(where, seed=record["seed"], weights=record["weights"]["path"])
    return build_grid(
        config=re.sub("^tasks/detection/", "tasks/voc/", record["mmdet"]["config"]["path"]),  # older records' path
        profile=profile,
        where=where,
        reconstruction=record.get("reconstruction", "mse-blocks"),
    )
