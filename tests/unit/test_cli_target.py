"""A task's command line checks a sparsity target once, as it parses it: the checked target it makes goes through
the method as it is, and a bad one is a parse error. (The library's side: test_run_setup.py; this module imports
the task CLI, so it is not one of the library's tests.)"""

import argparse

import pytest
import torch

import fcpts
from fcpts.core.masks import Sparsity
from tasks.grid import help as cli_help
from tests.unit.tiny import record_target_checks, tiny_net


@pytest.fixture
def checks(monkeypatch) -> list[float]:
    return record_target_checks(monkeypatch)


def test_the_command_line_checks_a_target_and_nothing_after_it_does(checks):
    target = cli_help.target("0.5")
    assert checks == [0.5] and isinstance(target, Sparsity)
    images = torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    fcpts.get_method("fcpts")(tiny_net(), images, target, iterations=2, batch_size=8, progress=False)
    assert checks == [0.5]  # the opening, the ERK start and the exact-target step took it as checked


@pytest.mark.parametrize("bad", ["1.5", "-0.1", "x"])
def test_a_bad_target_on_the_command_line_is_a_parse_error(bad):
    with pytest.raises(argparse.ArgumentTypeError):
        cli_help.target(bad)
