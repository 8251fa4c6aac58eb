"""CIFAR-10/100 classification (tasks/cifar/grid.py); its command line, declared here without importing torch."""

from tasks.grid.help import TaskCommand, flag

DATASETS = ("cifar10", "cifar100")  # tasks.grid.cifar_data.CIFAR_CLASSES
MODELS = ("resnet20", "resnet20b", "resnet32", "resnet32b", "resnet44", "resnet44b", "resnet56", "resnet56b")
COMMAND = TaskCommand(
    prog="python -m tasks.cifar",
    driver="tasks.cifar.grid",
    profiles=("paper", "paper-cpu", "fast", "quick"),
    default_profile="fast",
    method_sets=("cifar",),
    sparsity=(0.9,),
    models=("resnet56",),
    model_help="from: " + ", ".join(MODELS),
    model_choices=MODELS,
    first=(flag("--dataset", default="cifar10", choices=DATASETS),),
    flags=(
        flag("--data-root", help="folder with CIFAR (default: $FCPTS_DATA_ROOT, then ../shared/data)"),
        flag("--download", action="store_true", help="download CIFAR with torchvision if missing"),
    ),
)
