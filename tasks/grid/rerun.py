"""The tasks by name, their list (`python -m tasks.grid tasks`), and re-running a record's cell.

Drivers are found, not listed (`drivers`), and imported on first use (`get_task`), so none imports another.
`rerun_record` runs a record's cell again with its method options pinned and its weights found in this checkout."""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.grid.help import TaskCommand, command_parser
from tasks.grid.paths import REPO_ROOT

if TYPE_CHECKING:  # imported where used: the registry is read before torch is (a command's --help)
    from tasks.grid.profiles import Profile
    from tasks.grid.runner import Grid, Where

GridForRecord = Callable[..., "Grid"]
ENTRY_POINT_GROUP = "fcpts.tasks"  # an installed package's task: name = "its.driver.module"
TASKS_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Task:
    """What the tools that work across tasks need from a task's driver."""

    name: str
    grid_for_record: GridForRecord  # (record, profile, where) -> the grid the record came from
    build_grid: Callable[..., Grid]  # the driver's keyword grid builder
    plans: Callable[..., Any] | None = None  # arguments -> the GridPlans to run (tasks.grid.cli.main runs them)
    table: Callable[[list[dict]], str] | None = None  # the records' table printed at the end (`results_table`)
    dense_model: Callable[[dict], Any] | None = None  # record -> (its dense model, input shape without batch)
    make_data: Callable[..., Any] | None = None  # writes the task's substitute data set into a folder
    # What the task declares, for `python -m tasks.grid tasks` (as timm's list_models):
    command: TaskCommand | None = None  # the one command that runs its grids, its flags declared
    datasets: tuple[str, ...] = ()  # what --dataset/--data-root may name
    models: tuple[str, ...] = ()  # the names its model factory builds
    metrics: tuple[str, ...] = ()  # what its evaluator writes into a record's `metrics`
    profiles: tuple[str, ...] = ()  # its budgets, most faithful first

    def results_table(self, records: list[dict]) -> str:
        """The records' table printed at the end: the task's own, else a column per metric it declares."""
        from tasks.grid.runner import format_table, result_columns

        if self.table is not None:
            return self.table(records)
        return format_table(records, result_columns({m: m for m in self.metrics or ("top1", "top5")}))


TASKS: dict[str, Task] = {}


def register_task(name: str, **parts: Any) -> Callable[[GridForRecord], GridForRecord]:
    """`@register_task(name, ...)` on `f(record, profile, where) -> Grid`; `parts` are `Task`'s other fields."""

    def wrap(fn: GridForRecord) -> GridForRecord:
        TASKS[name] = Task(name, fn, **parts)
        return fn

    return wrap


@functools.cache
def drivers() -> dict[str, str]:
    """Task name -> the module registering it: each tasks/**/grid.py calling `register_task`, then entry points."""
    found = {}
    for path in sorted(TASKS_ROOT.glob("*/**/grid.py")):
        module = ".".join(("tasks", *path.relative_to(TASKS_ROOT).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_task" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found[first.value] = module
    return {**found, **{ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}}


def list_tasks() -> list[Task]:
    """Every task whose driver imports here (one missing an extra is left out), then runtime ones."""
    out = []
    for name in dict.fromkeys([*drivers(), *TASKS]):
        try:
            out.append(get_task(name))
        except ImportError:
            continue
    return out


def get_task(name: str) -> Task:
    """The registered task, its driver imported by name on first use; an unknown name is an error naming the known."""
    if name not in TASKS and name in drivers():
        importlib.import_module(drivers()[name])
    if name not in TASKS:
        raise ValueError(f"no task {name!r} is registered; known tasks: {', '.join(sorted({*drivers(), *TASKS}))}")
    return TASKS[name]


def all_methods_text(method_sets: tuple[str, ...]) -> str:
    """What `--all-methods` runs, from the registry: the paper's set, then any extras (not the paper's)."""
    from fcpts.methods import NOT_IN_PAPER, get_method
    from tasks.grid.layout import all_methods

    parts = []
    for name in method_sets:
        methods = all_methods(name)
        extras = [m for m in methods if get_method(m).role == NOT_IN_PAPER]
        paper = " ".join(m for m in methods if m not in extras)
        more = f", then beyond the paper (tables label them so): {' '.join(extras)}" if extras else ""
        parts.append(f"{name + ': ' if len(method_sets) > 1 else ''}the paper's set: {paper}{more}")
    return "; ".join(parts)


def table() -> str:
    """`python -m tasks.grid tasks`'s listing: every task as its driver declares it, and the methods."""
    from fcpts.methods import METHODS

    tasks = list_tasks()
    lines = [f"methods (--methods): {', '.join(sorted(METHODS))}"]
    for t in tasks:
        lines.append(f"{t.name}: {t.command.prog if t.command else ''}")
        lines += [
            f"  {key + ':':9s} {', '.join(getattr(t, key))}" for key in ("datasets", "models", "metrics", "profiles")
        ]
        if t.command:
            lines.append(f"  --all-methods: {all_methods_text(t.command.method_sets)}")
    missing = [name for name in drivers() if name not in {t.name for t in tasks}]
    if missing:
        lines.append(f"not importable here (an extra is missing): {', '.join(missing)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """`python -m tasks.grid tasks`."""
    doc = (
        "`python -m tasks.grid tasks`: every task the suite has, as its driver declares it (command, datasets, "
        "models,\nmetrics, profiles, what --all-methods runs), read from the task registry, and the methods --methods "
        "takes."
    )
    command_parser("python -m tasks.grid tasks", doc).parse_args(argv)
    print(table())
    return 0


def record_profile(record: dict) -> Profile:
    """The record's profile, its method's options pinned to what it ran with (but `NOT_IDENTITY`)."""
    from fcpts.core.loop import NOT_IDENTITY
    from tasks.grid.profiles import Profile
    from tasks.grid.record_options import pinned_options

    profile = Profile(**record["profile"])
    methods = {
        name: {**entry, "options": {k: v for k, v in entry["options"].items() if k not in NOT_IDENTITY}}
        if "options" in entry else entry
        for name, entry in profile.methods.items()
    }  # fmt: skip
    if pinned := pinned_options(record):
        entry = methods.get(record["method"], {})
        methods[record["method"]] = {**entry, "options": {**pinned, **entry.get("options", {})}}
    return replace(profile, methods=methods)


def local_weights(record: dict) -> dict:
    """The record with its weights path moved to the same file here (same sha256) when the path it names is absent:
    its tail after `results/weights/` or `data/weights/` looked for in those folders of this checkout."""
    from fcpts.core.io import file_sha256
    from tasks.grid.paths import resolve_data_root

    weights = record.get("weights") or {}
    path, sha256 = weights.get("path"), weights.get("sha256")
    if not path or not sha256 or Path(path).exists():
        return record
    anchors = {"results/weights/": REPO_ROOT / "results", "data/weights/": resolve_data_root(None, must_exist=False)}
    for anchor, root in anchors.items():
        _, found, tail = str(path).rpartition(anchor)
        candidate = root / "weights" / tail
        if found and candidate.is_file() and file_sha256(candidate) == sha256:
            return {**record, "weights": {**weights, "path": str(candidate)}}
    return record


def grid_for_record(record: dict, where: Where) -> Grid:
    record = local_weights(record)
    return get_task(record["task"]).grid_for_record(record, record_profile(record), where)


def rerun_record(record: dict, where: Where, force: bool = True) -> tuple[dict, Path]:
    """Run the record's cell again into `where.runs_dir`; returns the new record and its path."""
    from tasks.grid.runner import cell_path, run_grid

    grid = grid_for_record(record, where)
    (new,) = run_grid(grid, [record["method"]], [record["target_sparsity"]], force=force)
    return new, cell_path(grid, record["method"], record["target_sparsity"])
