"""Every grid command's main (`python -m tasks.<task>`) and the checks that run before any cell does.

A task declares its command line as data (tasks.grid.help.TaskCommand), so --help and argument errors need no torch;
the driver, and torch, are imported once the arguments are good."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tasks.grid.help import TaskCommand, default_device
from tasks.grid.status import JOB_ENV

if TYPE_CHECKING:
    from tasks.grid.profiles import Profile
    from tasks.grid.runner import Grid, Where

EXIT_BUSY = 3  # some cells were busy (tasks.grid.help.EXIT_CODES, shown at the end of every task's --help)


def task_command(task: str) -> TaskCommand:
    """The task's declared command line: a runtime task's own, else its driver package's `COMMAND`."""
    from tasks.grid.rerun import TASKS, drivers, get_task

    if task not in TASKS and task in drivers():
        return importlib.import_module(drivers()[task].rpartition(".")[0]).COMMAND
    command = get_task(task).command
    if not isinstance(command, TaskCommand):
        raise ValueError(f"task {task!r} registers no command (a TaskCommand and plans)")
    return command


def parse_args(task: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The task's arguments; `--all-methods` of a task with one method set becomes its methods."""
    command = task_command(task)
    args = command.parser().parse_args(argv)
    if args.all_methods and len(command.method_sets) == 1:
        from tasks.grid.layout import all_methods

        args.methods = all_methods(command.method_sets[0])
    return args


def profile_from_args(args: argparse.Namespace, profiles: dict[str, Profile], methods: Sequence[str]) -> Profile:
    """The chosen profile with the command line's overrides, renamed so its records never mix with it."""
    from fcpts.methods import training_methods
    from tasks.grid.profiles import pot_methods
    from tasks.grid.runner import check_options

    profile = profiles[args.profile]
    if args.iterations is not None:
        profile = profile.with_iterations(args.iterations)
    if args.pot_iterations is not None:
        profile = profile.with_pot_iterations(args.pot_iterations)
    if args.option:
        trained = tuple(m for m in methods if m in training_methods())
        # Else a renamed profile for nothing; a cluster job's cell belongs to a grid checked whole.
        if not trained and not os.environ.get(JOB_ENV):
            raise ValueError(
                f"--option {' '.join(args.option)} sets options of the training-loop methods "
                f"({', '.join(training_methods())}), and none of {', '.join(methods)} is one: "
                "POT's options take --pot-option KEY=VALUE"
            )
        profile = profile.with_option_pairs(trained, args.option, "", "training-loop method options")
    if args.pot_option:
        profile = profile.with_option_pairs(pot_methods(), args.pot_option, "pot-", "POT options")
    check_options(profile, methods, args.seed)  # an option a method lacks or a bad value: before any data is read
    return profile


def run_main(main: Callable[[], int]) -> int:
    """Log to stderr; an error a user can fix is one line, exit 2. The commit is pinned first."""
    from tasks.grid.paths import DataNotFoundError
    from tasks.grid.records import git_commit

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    git_commit()
    try:
        return main()
    except (DataNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def script_main(
    parse_args: Callable[[Sequence[str] | None], argparse.Namespace], work: Callable[[argparse.Namespace], object]
) -> Callable[..., int]:
    """`main(argv)` of a script that parses its flags and does one job, with `run_main`'s error handling."""

    def main(argv: Sequence[str] | None = None) -> int:
        args = parse_args(argv)

        def run() -> int:
            work(args)
            return 0

        return run_main(run)

    return main


def where(args: argparse.Namespace) -> Where:
    """What every task's grid takes from the shared flags."""
    from fcpts.core.options import resolve_device
    from tasks.grid.runner import Where

    if args.weights and len(getattr(args, "models", [None])) != 1:
        raise ValueError("--weights needs exactly one model in --models")
    args.device = default_device(args.device)
    resolve_device(args.device)  # "cuda" without CUDA: one clear line before any data is read
    check_writable(Path(args.results_dir), "--results-dir")
    if args.checkpoint_dir:
        check_writable(Path(args.checkpoint_dir), "--checkpoint-dir")
    return Where(
        seed=args.seed,
        data_root=getattr(args, "data_root", None),  # a task of synthetic data declares no --data-root
        weights=args.weights,
        runs_dir=Path(args.results_dir),
        checkpoint_dir=Path(args.checkpoint_dir) if args.checkpoint_dir else None,
        device=args.device,
        progress=not args.no_progress,
    )


def check_writable(folder: Path, flag: str) -> None:
    """A folder the command will write into, created and tried now: a read-only one fails before any work."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise ValueError(
            f"cannot write into {folder.resolve()} ({e.strerror or e}); give {flag} a folder you can write to"
        ) from None


class GridPlan(NamedTuple):
    """One grid of a command, its methods and targets; `selects` narrow the command to it (cluster jobs)."""

    grid: Grid
    methods: Sequence[str]
    targets: Sequence[float]
    selects: tuple[str, ...] = ()
    note: str = ""  # said under the grid by --dry-run (e.g. a dataset name assumed for data that is not here)


def planned_grid(task: str, dataset: str, model: str, profile: Profile, where: Where) -> Grid:
    """A grid to list, not to run (--dry-run): it names its cells, reads no data and builds no model."""

    def not_built(*_):
        raise RuntimeError("a planned grid is only listed (--dry-run); it builds no model and reads no data")

    from tasks.grid.runner import Grid

    return Grid(
        task=task, dataset=dataset, model=model, build_model=not_built, make_calibration=not_built,
        evaluate=not_built, profile=profile, **where.grid_fields(),
    )  # fmt: skip


def assumed_dataset(name: str, error: Exception) -> str:
    """The dry run's note for a grid whose data is not here: the name its records get with that data."""
    why = str(error).split(". ")[0]
    return f"{why}: listed as dataset {name}, the name its records get with that data"


def main(task: str, argv: Sequence[str] | None = None) -> int:
    """Every grid command's main (`python -m tasks.<task>`): the task's arguments, then each grid its driver plans is
    checked and run here or, with `--launcher submitit`, one cluster job per cell (`argv` narrowed to each)."""
    args = parse_args(task, argv)  # --help and argument errors answer here, before torch is imported
    before_driver = task_command(task).before_driver
    if before_driver is not None:
        before_driver()
    from fcpts.methods import get_method
    from tasks.grid import estimate, launch
    from tasks.grid.rerun import get_task
    from tasks.grid.runner import run_grid

    declared = get_task(task)
    if declared.plans is None:
        raise ValueError(f"task {task!r} registers no plans")
    plans, table = declared.plans, declared.results_table

    def run() -> int:
        launch.check_launcher_args(args)
        args.methods = list(dict.fromkeys(args.methods))  # a method or target given twice is one cell
        args.sparsity = list(dict.fromkeys(args.sparsity)) if args.sparsity else args.sparsity
        for m in args.methods:
            get_method(m)  # an unknown name is a ValueError listing the known ones
        if args.dry_run:
            return estimate.dry_run(args, plans(args))
        if args.launcher == "submitit":
            code = launch.launch(args, plans(args), sys.argv[1:] if argv is None else argv, table)
            print(f"records: {Path(args.results_dir).resolve()}")
            return code
        records: list[dict] = []
        ran = busy = 0
        for grid, methods, targets, *_ in plans(args):
            out = run_grid(grid, list(methods), list(targets), force=args.force)
            records += out
            ran, busy = ran + len(out.ran), busy + len(out.busy)
        print()
        print(table(records))
        print(f"records: {Path(args.results_dir).resolve()}")
        if busy:
            print(f"{busy} cell(s) busy in another process: run the same command again once it is done (exit 3)")
            return EXIT_BUSY
        if not ran:
            print(f"nothing to do: all {len(records)} cell(s) already have records (--force redoes them)")
        return 0

    return run_main(run)
