"""The command-line flags every task shares, and the checks that run before any cell does.

Each task adds its own flags (models, datasets, task options); methods, targets, profile overrides, seed,
folders, device, resume control and the cluster launcher's flags (tasks.grid.launch) are declared here once.
Every argument of a grid is validated at parse time, so a typo in the last target fails before hours of earlier
cells.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from fcpts.core.masks import check_target
from fcpts.core.options import resolve_device
from fcpts.methods import METHODS, NOT_IN_PAPER, get_method, list_methods, training_methods
from tasks.grid import arg_types, estimate, launch
from tasks.grid.data import DataNotFoundError
from tasks.grid.help import add_device, add_results_dir, default_device
from tasks.grid.layout import all_methods
from tasks.grid.lock import JOB_ENV
from tasks.grid.paths import RUNS_DIR, checkpoint_dir_for
from tasks.grid.profiles import Profile
from tasks.grid.records import git_commit, read_record
from tasks.grid.rerun import get_task
from tasks.grid.runner import Grid, Where, cell_budget, cell_path, check_cells, check_options, format_table, run_grid

# What a task's exit status tells a script (also shown at the end of every task's --help).
EXIT_OK = 0  # every cell has its record: run now, or found from before ("nothing to do" is said)
EXIT_FAILED = 1  # a cell ran and failed (cluster jobs), or a check found a regression
EXIT_USAGE = 2  # bad input, named on one line before any work
EXIT_BUSY = 3  # some cells were left to other processes running them; run the command again later
EXIT_CODES = """exit status:
  0  every cell has its record, run now or found from before (a run with nothing to do says so)
  1  a cell failed (cluster jobs)
  2  bad input: one line on stderr, before any work
  3  some cells were busy in another process: run the same command again once it is done
"""


def add_model_args(p: argparse.ArgumentParser, default: Sequence[str], help: str, **kwargs) -> None:
    """`--models A [B ...]`, with `--model` accepted as the same flag, so every task takes either spelling."""
    kwargs.setdefault("metavar", "MODEL")
    p.add_argument("--models", "--model", dest="models", nargs="+", default=list(default), help=help, **kwargs)


def target(text: str) -> float:
    """argparse type: a global sparsity target in [0, 1)."""
    try:
        return check_target(float(text))
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_grid_args(
    p: argparse.ArgumentParser,
    profiles: dict[str, Profile],
    default_profile: str,
    tasks: Sequence[str],
    default_sparsity: Sequence[float] | None,
    sparsity_default: str = "",
) -> None:
    """`tasks`: the method sets (tasks.grid.layout.METHOD_SETS) whose `--all-methods` this command runs (ImageNet:
    one for CNNs, one for ViTs); `sparsity_default` says what a grid without `default_sparsity` runs."""
    p.add_argument("--methods", nargs="+", default=["fcpts"], help=f"from: {', '.join(sorted(METHODS))}")
    p.add_argument("--all-methods", action="store_true", help=all_methods_help(tasks))
    p.add_argument(
        "--sparsity",
        nargs="+",
        type=target,
        default=list(default_sparsity) if default_sparsity else None,
        help="global sparsity targets in [0, 1)" + (f" (default: {sparsity_default})" if sparsity_default else ""),
    )
    p.add_argument("--profile", default=default_profile, choices=sorted(profiles))
    p.add_argument("--iterations", type=int, help="override the profile's iteration count (recorded; renames it)")
    p.add_argument(
        "--pot-iterations",
        type=int,
        help="override POT's iterations per layer (recorded; the profile is renamed <name>-pot<N>)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option override for the training-loop methods run, for design measurements (renames "
        "the profile), e.g. lr=0.005",
    )
    p.add_argument(
        "--pot-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="POT option override for design measurements (renames the profile), e.g. fold_bn=false",
    )
    p.add_argument(
        "--seed", type=arg_types.seed, default=0, help="the calibration subset's and the method's seed (>= 0)"
    )
    p.add_argument("--weights", help="dense weights file for the (single) model")
    add_results_dir(p, str(RUNS_DIR), "where records go")
    p.add_argument("--checkpoint-dir", help="where resumable state goes (default: beside --results-dir)")
    add_device(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="redo cells that already have a record, from a clean start (an interrupted redo resumes with --force)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list the cells with their record paths and an estimated time from comparable records, run nothing",
    )
    p.add_argument("--no-progress", action="store_true")
    launch.add_launcher_args(p)
    p.epilog = EXIT_CODES
    p.set_defaults(prog=p.prog)  # `python -m tasks.<task>`: what a cluster job runs for one cell


def all_methods_help(tasks: Sequence[str]) -> str:
    """What `--all-methods` runs, said in `--help` from the registry, so nobody is surprised by an extra that is
    not the paper's."""
    parts = []
    for task in tasks:
        methods = all_methods(task)
        extras = [m for m in methods if get_method(m).role == NOT_IN_PAPER]
        paper = " ".join(m for m in methods if m not in extras)
        more = f", then beyond the paper (tables label them so): {' '.join(extras)}" if extras else ""
        parts.append(f"{task + ': ' if len(tasks) > 1 else ''}the paper's set: {paper}{more}")
    return "; ".join(parts)


def parse(p: argparse.ArgumentParser, argv: Sequence[str] | None, task: str) -> argparse.Namespace:
    """Parse; `--all-methods` becomes the methods of the method set `task`, in registry order (`all_methods`)."""
    args = p.parse_args(argv)
    args.methods = all_methods(task) if args.all_methods else args.methods
    return args


def check_methods(methods: Sequence[str]) -> None:
    for m in methods:
        get_method(m)  # an unknown name is a ValueError listing the known ones


def profile_from_args(args: argparse.Namespace, profiles: dict[str, Profile], methods: Sequence[str]) -> Profile:
    """The chosen profile with the command line's overrides, renamed so its records never mix with it."""
    profile = profiles[args.profile]
    if args.iterations is not None:
        profile = profile.with_iterations(args.iterations)
    if args.pot_iterations is not None:
        profile = profile.with_pot_iterations(args.pot_iterations)
    if args.option:
        trained = tuple(m for m in methods if m in training_methods())
        # Else the profile would be renamed for an override that reaches no method. A submitted grid's cell (a job)
        # runs one method of a grid that was checked whole, whose other methods the override reaches.
        if not trained and not os.environ.get(JOB_ENV):
            raise ValueError(
                f"--option {' '.join(args.option)} sets options of the training-loop methods "
                f"({', '.join(training_methods())}), and none of {', '.join(methods)} is one: "
                "POT's options take --pot-option KEY=VALUE"
            )
        profile = profile.with_option_pairs(trained, args.option, "", "training-loop method options")
    if args.pot_option:
        pot = tuple(list_methods(family="pot"))
        profile = profile.with_option_pairs(pot, args.pot_option, "pot-", "POT options")
    check_options(profile, methods, args.seed)  # an option a method lacks or a bad value: before any data is read
    return profile


def run_main(main: Callable[[], int]) -> int:
    """Log to stderr, and turn the errors a user can fix into one line and exit status 2. The commit is read
    first, so a record written hours later names the code that ran, not what was committed meanwhile."""
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
    """`main(argv)` of a script that parses its flags and does one job (training a dense model), with `run_main`'s
    error handling: one way for every script to start and fail."""

    def main(argv: Sequence[str] | None = None) -> int:
        args = parse_args(argv)

        def run() -> int:
            work(args)
            return 0

        return run_main(run)

    return main


def where(args: argparse.Namespace) -> Where:
    """What every task's grid takes from the shared flags."""
    if args.weights and len(getattr(args, "models", [None])) != 1:
        raise ValueError("--weights needs exactly one model in --models")
    args.device = default_device(args.device)
    resolve_device(args.device)  # "cuda" without CUDA: one clear line before any data is read
    check_writable(Path(args.results_dir), "--results-dir")
    if args.checkpoint_dir:
        check_writable(Path(args.checkpoint_dir), "--checkpoint-dir")
    return Where(
        seed=args.seed,
        data_root=args.data_root,
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
    """One grid of a command, its methods and targets; `selects` are the flags that narrow the command to this
    grid alone (e.g. `--models resnet50`), which a command planning several grids must give for cluster jobs."""

    grid: Grid
    methods: Sequence[str]
    targets: Sequence[float]
    selects: tuple[str, ...] = ()
    note: str = ""  # said under the grid by --dry-run (e.g. a dataset name assumed for data that is not here)


def planned_grid(task: str, dataset: str, model: str, profile: Profile, where: Where) -> Grid:
    """A grid to list, not to run (--dry-run): what names its cells and nothing more, so a dry run reads no
    data, no weights and builds no model (and works before the data is downloaded)."""

    def not_built(*_):
        raise RuntimeError("a planned grid is only listed (--dry-run); it builds no model and reads no data")

    return Grid(
        task=task, dataset=dataset, model=model, build_model=not_built, make_calibration=not_built,
        evaluate=not_built, profile=profile, **where.grid_fields(),
    )  # fmt: skip


def assumed_dataset(name: str, error: Exception) -> str:
    """The dry run's note for a grid whose data is not here: the name its records get with that data."""
    why = str(error).split(". ")[0]
    return f"{why}: listed as dataset {name}, the name its records get with that data"


def main(task: str, argv: Sequence[str] | None = None) -> int:
    """Every grid command's main (`python -m tasks.<task>`): the registered task's arguments, its plans run."""
    declared = get_task(task)
    if declared.parse_args is None or declared.plans is None:
        raise ValueError(f"task {task!r} registers no command (parse_args and plans)")
    return run_grids(declared.parse_args(argv), declared.plans, declared.table or format_table, argv)


def run_grids(
    args: argparse.Namespace,
    plans: Callable[[argparse.Namespace], Iterable[GridPlan]],
    table: Callable[[list[dict]], str],
    argv: Sequence[str] | None = None,
) -> int:
    """A task's main: check the methods, run each (grid, methods, targets) planned here or, with `--launcher
    submitit`, as one cluster job per cell (`argv`, the command's arguments, is narrowed to each cell), and
    print the table."""

    def run() -> int:
        launch.check_launcher_args(args)
        args.methods = list(dict.fromkeys(args.methods))  # a method or target given twice is one cell
        args.sparsity = list(dict.fromkeys(args.sparsity)) if args.sparsity else args.sparsity
        check_methods(args.methods)
        if args.dry_run:
            return dry_run(args, plans(args))
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
        return EXIT_OK

    return run_main(run)


def dry_run(args: argparse.Namespace, plans: Iterable[GridPlan], log: Callable[[str], None] = print) -> int:
    """List every planned cell: its record path, whether it has a record, and how long it should take."""
    known, projected = estimate.comparable_records([Path(args.results_dir)]), estimate.scale_projections()
    total, unknown, cells, to_run = 0.0, 0, 0, 0
    for plan in plans:
        grid, methods, targets = plan.grid, plan.methods, plan.targets
        check_cells(grid, list(methods), list(targets))
        log(f"{grid.task} {grid.dataset} {grid.model}, profile {grid.profile.name}, seed {grid.seed}:")
        if plan.note:
            log(f"  ({plan.note})")
        grid_to_run = 0
        for method in methods:
            budget = {
                **cell_budget(grid.profile, method, grid.seed),
                "n_images": grid.profile.n_calibration_for(method),
            }
            for target in targets:
                cells += 1
                path = cell_path(grid, method, target).resolve()
                if not args.force and read_record(path) is not None:
                    log(f"  done     {method:18s} {target:6.2%}  {'-':>9s}  {path}")
                    continue
                to_run += 1
                grid_to_run += 1
                guess = estimate.estimate(
                    known, grid.task, grid.dataset, grid.model, method, grid.profile.name, target, projected, budget
                )
                total += guess.seconds or 0.0
                unknown += guess.seconds is None
                log(f"  to run   {method:18s} {target:6.2%}  {estimate.duration(guess.seconds):>9s}  {path}")
                log(f"           ({guess.basis})")
        if grid_to_run:
            kept = checkpoint_dir_for(grid.runs_dir) if grid.checkpoint_dir is None else grid.checkpoint_dir
            cached = any((kept / grid.task / grid.dataset / grid.model).glob("dense-*.json"))
            start = estimate.grid_start(known, grid.task, grid.dataset, grid.model, cached)
            total += start.seconds or 0.0
            log(f"  + once   {'(grid start)':26s}  {estimate.duration(start.seconds):>9s}  ({start.basis})")
    if to_run == unknown:
        time = "time unknown (no comparable record)" if to_run else "nothing to run"
    else:
        time = f"about {estimate.duration(total)} for the {to_run - unknown} with an estimate"
        time += f", {unknown} of unknown time" if unknown else ""
        time += " (times of the machines the records or projections ran on)"
    log(f"{cells} cell(s): {cells - to_run} with a record, {to_run} to run, {time}; nothing was run")
    return EXIT_OK
