"""What every method promises, checked on every method the registry holds, and on a throwaway method registered
here at run time: a new method is held to the same contract, and reaches the task commands, by its module alone.

The contract: a bad option or target is refused before any work, the model left as it was; a run's report says
the sparsity its model holds; that is the target to one weight, or the report's first line says it missed."""

from __future__ import annotations

import copy
import time
from dataclasses import fields

import pytest
import torch

import fcpts
from fcpts.core import allocation
from fcpts.core.masks import apply_keep_masks, sparsity_summary
from fcpts.core.options import MethodOptions, open_run
from fcpts.core.report import SparsityReport
from fcpts.methods import METHODS, Method, register
from fcpts.methods.registry import UnknownOptionError, unregister
from tasks.grid.cli import main as task_main
from tests.unit.tiny import tiny_images, tiny_net

TARGET = 0.75
# The smallest budget each kind of method takes, where its options have the field: the contract is about what a
# run returns, not how well it prunes.
SMALLEST = {"iterations": 2, "batch_size": 8, "search_runs": 1}


def smallest_budget(name: str) -> dict:
    names = {f.name for f in fields(METHODS[name].options)}
    return {k: v for k, v in SMALLEST.items() if k in names}


def unchanged(model: torch.nn.Module, before: dict) -> bool:
    return all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def check_contract(name: str) -> None:
    model = tiny_net()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(UnknownOptionError, match="no_such_option"):
        fcpts.sparsify(model, tiny_images(), TARGET, method=name, no_such_option=1)
    with pytest.raises(ValueError, match="1.5"):
        fcpts.sparsify(model, tiny_images(), 1.5, method=name, progress=False)
    assert unchanged(model, before), "a refused call changed the model"

    sparse, report = fcpts.sparsify(model, tiny_images(), TARGET, method=name, progress=False, **smallest_budget(name))
    achieved, per_layer = sparsity_summary(sparse)
    n = sum(row["numel"] for row in per_layer)
    assert report.achieved_sparsity == achieved and report.target_sparsity == TARGET
    exact = round(achieved * n) == round(TARGET * n)
    assert exact != bool(report.missed_target()), report.summary()
    if not exact:
        assert report.summary().splitlines()[0] == report.missed_target()


@pytest.mark.parametrize("name", list(METHODS))
def test_every_registered_method_keeps_the_contract(name):
    check_contract(name)


def random_prune(model, calibration, target, options: MethodOptions) -> tuple[torch.nn.Module, SparsityReport]:
    """A throwaway method: one global cut over seeded random scores."""
    t0 = time.perf_counter()
    target, _, layers, _ = open_run(model, None, target, options)
    generator = torch.Generator().manual_seed(options.seed)
    scores = {n: torch.rand(m.weight.shape, generator=generator) for n, m in layers.items()}
    apply_keep_masks(layers, allocation.global_keep_masks(scores, target))
    achieved, per_layer = sparsity_summary(model, options.exclude, options.filter_fn)
    return model, SparsityReport("random", target, achieved, per_layer, wall_s=time.perf_counter() - t0)


@pytest.fixture
def throwaway_method():
    register(Method("throwaway-random", "Random (throwaway)", random_prune, MethodOptions))
    yield "throwaway-random"
    unregister("throwaway-random")


def test_a_method_registered_at_run_time_keeps_the_contract_and_reaches_the_task_commands(
    throwaway_method, tmp_path, capsys
):
    from tasks.grid.cli import parse_args

    check_contract(throwaway_method)
    assert throwaway_method in parse_args("cifar", ["--all-methods"]).methods
    argv = ["--model", "resnet20", "--methods", throwaway_method, "--sparsity", "0.5", "--dry-run"]
    assert task_main("cifar", [*argv, "--data-root", str(tmp_path / "absent"), "--results-dir", str(tmp_path)]) == 0
    assert throwaway_method in capsys.readouterr().out


@pytest.fixture
def throwaway_task():
    """A task declared at run time as a driver declares one: its flags on the shared grid flags, its plans, its
    registration; no other file names it."""
    from tasks.grid import cli
    from tasks.grid.help import TaskCommand
    from tasks.grid.profiles import profile_table, quick_profile
    from tasks.grid.rerun import TASKS, register_task

    profiles = profile_table(quick_profile(16, iterations=2, batch_size=4, eval_limit=8, pot_iterations=2))

    command = TaskCommand(  # no --data-root: a task of synthetic data declares none
        prog="python -m tasks.throwaway", driver="tests.unit.test_method_contract", profiles=tuple(profiles),
        default_profile="quick", method_sets=("cifar",), sparsity=(0.5,), models=("toy-net",), model_help="any name",
    )  # fmt: skip

    def plans(args):
        profile = cli.profile_from_args(args, profiles, args.methods)
        for model in args.models:
            grid = cli.planned_grid("throwaway", "toy-data", model, profile, cli.where(args))
            yield cli.GridPlan(grid, args.methods, args.sparsity, ("--models", model))

    register_task("throwaway", build_grid=lambda **_: None, command=command, plans=plans)(lambda *_: None)
    yield "throwaway"
    TASKS.pop("throwaway")


def test_a_task_registered_at_run_time_is_listed_and_dry_runs_the_registry_s_methods(
    throwaway_task, throwaway_method, tmp_path, capsys
):
    from tasks.grid.rerun import get_task, list_tasks

    assert get_task("throwaway").command.prog == "python -m tasks.throwaway" and "throwaway" in {
        t.name for t in list_tasks()
    }
    argv = ["--all-methods", "--dry-run", "--device", "cpu", "--results-dir", str(tmp_path)]
    assert task_main(throwaway_task, argv) == 0  # the one main every task's command runs
    out = capsys.readouterr().out
    assert "throwaway toy-data toy-net, profile quick" in out
    assert all(f" {m} " in out for m in ("fcpts", throwaway_method))
