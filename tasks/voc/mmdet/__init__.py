"""The detection task on single-stage detectors built by mmdet from the user's config
(`python -m tasks.voc --framework mmdet --config CONFIG --weights FILE ...`): the only package that imports mmdet,
mmengine or mmcv (the `[mmdet]` extra plus mmcv, docs/tasks.md).
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
    """Without the extra, exit 2 naming what is missing and the fix, before an mmdet import's traceback."""
    why = missing()
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        raise SystemExit(2)


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
    before_driver=exit_if_missing,
)
