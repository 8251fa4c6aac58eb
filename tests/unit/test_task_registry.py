"""The task registry: tools that work across tasks find a task's driver by name, never by importing it."""

import importlib.util
import subprocess
import sys

import pytest

from tasks.grid.paths import REPO_ROOT as ROOT
from tasks.grid.rerun import Task, drivers, get_task


def test_a_task_is_found_by_name_and_its_driver_imported_on_first_use():
    """In a fresh interpreter nothing is registered until a task is asked for; then its driver is imported."""
    code = (
        "import sys\n"
        "from tasks.grid.rerun import TASKS, get_task\n"
        "assert not TASKS and 'tasks.imagenet.grid' not in sys.modules\n"
        "task = get_task('imagenet')\n"
        "print(task.name, task.build_grid.__module__, task.dense_model.__module__)\n"
        "print('tasks.imagenet.grid' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    out = run.stdout.split()
    assert out == ["imagenet", "tasks.imagenet.grid", "tasks.imagenet.grid", "True"]


def test_each_task_registers_what_the_tools_use():
    cifar, voc = get_task("cifar"), get_task("voc")
    assert (cifar.build_grid.__module__, cifar.dense_model.__module__) == ("tasks.cifar.grid", "tasks.cifar.grid")
    assert (voc.build_grid.__module__, voc.make_data.__module__) == ("tasks.voc.grid", "tasks.voc.make_set")
    assert voc.dense_model is None  # deploy says it has no model builder for detection records


def test_an_unknown_task_is_an_error_naming_the_known_ones():
    with pytest.raises(ValueError, match="no task 'mnist' is registered; known tasks: .*cifar.*imagenet.*voc"):
        get_task("mnist")


def test_drivers_are_found_by_reading_the_task_folders():
    """Each found driver registers the name it was found under (the mmdet one needs its extra)."""
    found = drivers()
    assert {"cifar", "imagenet", "voc"} <= set(found)
    for name, module in found.items():
        try:
            task = get_task(name)
        except ImportError:
            continue
        assert task.grid_for_record.__module__ == module


def test_each_task_declares_what_its_command_takes():
    """The declared datasets, models and profiles are ones the task's own command line accepts."""
    from tasks.cifar import grid as cifar_grid
    from tasks.grid.cli import parse_args
    from tasks.grid.rerun import list_tasks
    from tasks.imagenet import grid as imagenet_grid
    from tasks.voc import grid as voc_grid

    tasks = {t.name: t for t in list_tasks()}
    assert {"cifar", "imagenet", "voc"} <= set(tasks)
    for dataset in tasks["cifar"].datasets:
        assert parse_args("cifar", ["--dataset", dataset]).dataset == dataset
    assert parse_args("cifar", ["--models", *tasks["cifar"].models]).models == list(tasks["cifar"].models)
    assert parse_args("imagenet", ["--models", *tasks["imagenet"].models]).models == list(tasks["imagenet"].models)
    for name, driver in (("cifar", cifar_grid), ("imagenet", imagenet_grid), ("voc", voc_grid)):
        assert tasks[name].profiles == tuple(driver.PROFILES) == tasks[name].command.profiles
        assert parse_args(name, ["--profile", tasks[name].profiles[0]]).profile == "paper"
    for task in tasks.values():  # each command runs a package of this checkout with -m
        assert importlib.util.find_spec(f"{task.command.prog.split()[2]}.__main__"), task.command.prog


def test_the_declared_command_lines_name_what_the_drivers_build():
    """A command line is declared without importing torch, so its names are written out: they must be the code's."""
    from tasks.grid.cifar_data import CIFAR_CLASSES
    from tasks.grid.cifar_models import CIFAR_MODELS
    from tasks.grid.cli import task_command
    from tasks.voc.ssd import ARCHITECTURES, RECONSTRUCTIONS

    cifar, voc = task_command("cifar"), task_command("voc")
    assert cifar.model_choices == tuple(sorted(CIFAR_MODELS)) and cifar.first[0][1]["choices"] == tuple(CIFAR_CLASSES)
    assert voc.models == tuple(ARCHITECTURES) and voc.sparsity == (0.9,)  # Table 5's
    assert voc.flags[0][1]["choices"] == tuple(sorted(RECONSTRUCTIONS))


def test_the_task_list_names_every_task():
    from tasks.grid.layout import extra_methods
    from tasks.grid.rerun import table

    text = table()
    head, _, rest = text.partition("not importable here (an extra is missing): ")
    missing = rest.split(", ") if rest else []
    for name in drivers():
        assert (f"\n{name}: " in f"\n{text}") != (name in missing), name
    assert "cifar: python -m tasks.cifar\n  datasets: cifar10, cifar100\n" in text
    extras = " ".join(extra_methods("cifar"))
    assert (
        f"  --all-methods: the paper's set: pot-l2norm pot-erk fcpts, then beyond the paper (tables label them so): "
        f"{extras}\n" in text
    )


def test_a_task_without_its_own_table_prints_a_column_per_metric_it_declares():
    task = Task("toy", grid_for_record=lambda *_: None, build_grid=lambda **_: None, metrics=("top1",))
    record = {"method": "fcpts", "target_sparsity": 0.5, "achieved_sparsity": 0.5, "wall_s": 1.0}
    record |= {"metrics": {"top1": 70.0, "n_images": 8}, "dense_metrics": {"top1": 80.0, "n_images": 8}}
    head, _, row = task.results_table([record]).splitlines()
    assert head.split() == ["method", "target", "achieved", "top1", "dense", "drop", "time", "s"]
    assert row.split()[3:6] == ["70.00", "80.00", "10.00"]
