"""ImageNet classification (tasks/imagenet/grid.py); its command line, declared here without importing torch."""

from tasks.grid.help import WORKERS, TaskCommand, flag
from tasks.grid.imagenet_catalogue import MODELS, PAPER_CNNS, PAPER_VITS

COMMAND = TaskCommand(
    prog="python -m tasks.imagenet",
    driver="tasks.imagenet.grid",
    profiles=("paper", "cpu", "quick"),
    default_profile="cpu",
    method_sets=("imagenet-cnn", "imagenet-vit"),
    sparsity_help="the paper's: 0.5 0.6 0.7 0.8 0.9 for CNNs, 0.5 0.6 0.7 for ViTs",
    models=("efficientnet_lite0",),
    model_help=f"from: {', '.join(MODELS)}; 'paper' = {' '.join(PAPER_CNNS + PAPER_VITS)}",
    flags=(
        flag(
            "--data-root",
            help="ImageNet folder, or a folder holding imagenet/ (default: $FCPTS_DATA_ROOT, then ../shared/data)",
        ),
        WORKERS,
    ),
)
