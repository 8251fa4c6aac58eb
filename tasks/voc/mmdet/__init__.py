"""The detection task on detectors built by mmdet (OpenMMLab's detection toolbox) from the user's config.

    python -m tasks.voc --framework mmdet --config CONFIG --weights FILE --data-root DIR --all-methods

This subpackage is the only place that imports mmdet, mmengine or mmcv; the rest of the suite runs without
them. Install with the `[mmdet]` extra plus mmcv (docs/tasks.md: a prebuilt CPU wheel here, OpenMMLab's wheels for
other torch/CUDA pairs). Modules, one job each:

    detector   config -> detector through mmengine's registry, checkpoint loading, versions and hashes
    view       the detector as one output tensor (per-anchor class log-probabilities) for the methods,
               its raw class and box head outputs exposed for FCPTS's MSE, and the prunable-layer rule
    data       VOC- or COCO-layout folders as mmdet datasets; calibration images through the test pipeline
    evaluate   mmdet's metric for the dataset (VOCMetric 11-point, CocoMetric) through mmengine's test loop
    grid       the grid of one detector (records in the suite's format), `python -m tasks.voc.mmdet`
    train      resumable dense training with mmengine's Runner (the substitute set's detector)
    configs/   mmdet configs of the suite (SSDLite-MobileNetV2 on the VOC-layout substitute set)
"""

import sys
from dataclasses import replace

from tasks.grid.help import WORKERS, deprecated, flag
from tasks.voc import COMMAND as SUITE_COMMAND
from tasks.voc import RECONSTRUCTIONS

INSTALL_HINT = (
    "the mmdet detection task needs mmdet and mmengine (`pip install -e '.[mmdet]'`) and mmcv with its compiled "
    "ops: here `pip install ../shared/wheels/mmcv-2.1.0-cp311-cp311-linux_x86_64.whl` (built for torch 2.14.1), "
    "elsewhere OpenMMLab's wheel for your torch/CUDA pair (`mim install mmcv==2.1.0`)"
)

COMMAND = replace(  # its command line (the detection task's profiles), declared without importing torch or mmdet
    SUITE_COMMAND,
    prog="python -m tasks.voc --framework mmdet",
    driver="tasks.voc.mmdet.grid",
    first=(
        flag(
            "--config",
            "--model",
            "--models",
            dest="config",
            required=True,
            help="an mmdet config file (single-stage detector): this task's model, so --model/--models name it too",
        ),
    ),
    flags=(
        deprecated("--checkpoint", "--weights", "weights"),  # --weights: the detector's mmdet checkpoint
        flag("--reconstruction", default="mse-blocks", choices=RECONSTRUCTIONS),
        flag("--data-root", help="a VOC- or COCO-layout folder (default: $FCPTS_DATA_ROOT, then ../shared/data)"),
        WORKERS,
        flag("--eval-batch-size", type=int, default=16),
    ),
    models=(),
)


def missing() -> str | None:
    """Why the mmdet task cannot run here (None: it can): a missing package or mmcv without its ops."""
    try:
        import mmcv.ops  # noqa: F401  (the compiled ops: nms)
        import mmdet  # noqa: F401
        import mmengine  # noqa: F401
    except ImportError as e:
        return f"{e}; {INSTALL_HINT}"
    return None


def exit_if_missing() -> None:
    """For this subpackage's commands: without the extra, exit 2 naming what is missing and the fix, before any
    mmdet import fails with a traceback."""
    why = missing()
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        raise SystemExit(2)
