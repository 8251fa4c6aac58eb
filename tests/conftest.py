"""Shared test helpers: real data is required in CI and skipped, with the reason, on a user's machine; tests
marked `cuda` run where a CUDA device is, and are skipped with the reason elsewhere; `--library-only` collects only
the library's tests (tests/library_tests.py: chosen by what they import)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tasks.grid.paths import resolve_data_root
from tests.library_tests import is_library_test

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
NO_CUDA = "needs a CUDA device: torch.cuda.is_available() is False on this machine"
# Parametrize a test over this to run it on the CPU always and on a GPU where there is one.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def pytest_addoption(parser):
    parser.addoption(
        "--library-only",
        action="store_true",
        help="collect only the library's tests: the modules of tests/unit and tests/library that import nothing "
        "beyond fcpts, baselines, torch, numpy, tqdm and pytest (tox -e core, tox -e lowest)",
    )


def pytest_ignore_collect(collection_path, config):
    """Under --library-only, every other test module is left uncollected (never imported: the packages it needs
    may not be installed)."""
    is_test_module = collection_path.suffix == ".py" and collection_path.name.startswith("test_")
    if config.getoption("library_only") and is_test_module and not is_library_test(collection_path):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(pytest.mark.skip(reason=NO_CUDA))


def require_data(relative: str, what: str) -> Path:
    """The path `relative` under the data root; a missing one fails the test in CI (a vacuous pass would hide
    that nothing real was tested) and skips it elsewhere, saying how to provide it."""
    path = resolve_data_root(must_exist=False) / relative
    if not path.exists():
        message = (
            f"{what} not found at {path}: put the suite's shared data folder beside the repository "
            "(../shared/data) or set FCPTS_DATA_ROOT"
        )
        if IN_CI:
            pytest.fail(f"CI must test on real data: {message}")
        pytest.skip(message)
    return path


def require_mmdet() -> None:
    """Call at the top of a test module for the mmdet task: without the `[mmdet]` extra the module is skipped
    with the reason (and fails in CI, which installs it)."""
    from tasks.voc.mmdet import missing

    why = missing()
    if why is not None:
        message = f"the mmdet detection task is not installed: {why}"
        if IN_CI:
            pytest.fail(f"CI must test the mmdet task: {message}", pytrace=False)
        pytest.skip(message, allow_module_level=True)
