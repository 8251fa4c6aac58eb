"""The task registry: tools that work across tasks find a task's driver by name, never by importing it."""

import subprocess
import sys

import pytest

from tasks.grid.paths import REPO_ROOT as ROOT
from tasks.grid.rerun import DRIVERS, get_task


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
    assert set(DRIVERS) == {"cifar", "imagenet", "voc", "coco"}
