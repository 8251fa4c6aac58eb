"""PASCAL VOC detection (tasks/voc/grid.py); its command line, declared here without importing torch."""

from tasks.grid.help import WORKERS, TaskCommand, flag

MODELS = ("mb1-ssd", "mb2-ssd-lite")  # tasks.voc.ssd.ARCHITECTURES
FRAMEWORKS = ("suite", "mmdet")  # who builds the detector: the suite's own SSDs, or mmdet from a config
RECONSTRUCTIONS = ("kl-box", "mse-blocks", "mse-heads")  # tasks.voc.ssd.RECONSTRUCTIONS
COMMAND = TaskCommand(
    prog="python -m tasks.voc",
    driver="tasks.voc.grid",
    profiles=("paper", "cpu", "quick"),  # tasks.voc.grid.PROFILES, mmdet's detectors' too
    default_profile="cpu",
    method_sets=("voc",),
    sparsity=(0.9,),
    models=MODELS,
    model_help="detectors",
    model_choices=MODELS,
    first=(
        flag(
            "--framework",
            choices=FRAMEWORKS,
            default="suite",
            help="suite: the suite's own SSDs (the flags here); mmdet: any single-stage mmdet detector from its "
            "config and checkpoint (python -m tasks.voc --framework mmdet --help lists its flags)",
        ),
    ),
    flags=(
        flag(
            "--reconstruction",
            default="mse-blocks",
            choices=RECONSTRUCTIONS,
            help="FCPTS's reconstruction output on the detector (see above)",
        ),
        flag("--image-size", type=int, default=300, help="square input (pytorch-ssd: 300)"),
        flag("--data-root", help="folder holding VOCdevkit/VOC2007 (default: $FCPTS_DATA_ROOT, then ../shared/data)"),
        WORKERS,
    ),
)


def main(argv=None) -> int:
    """`python -m tasks.voc`: `--framework mmdet` hands the rest of the command line to mmdet's driver (its extra is
    checked once its arguments parse, by its COMMAND's before_driver)."""
    import argparse

    from tasks.grid.cli import main as task_main

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--framework", choices=FRAMEWORKS, default="suite")
    known, rest = pre.parse_known_args(argv)
    return task_main("coco" if known.framework == "mmdet" else "voc", rest)
