"""The library's tests (tox's core and lowest envs) are chosen by what they import: every module of tests/unit and
tests/library that imports only the library, its core dependencies and pytest is one, and no other is."""

from __future__ import annotations

import configparser
import subprocess
import sys

from tests import library_tests as selection
from tests.library_tests import ROOT, TESTS, is_library_test, library_tests, outside_imports


def test_the_library_tests_are_those_that_import_only_the_library():
    chosen = {p.relative_to(TESTS).as_posix() for p in library_tests()}
    for name in ("test_library_api", "test_library_inputs", "test_magnitude_bn", "test_run_setup", "test_sparsify"):
        assert f"unit/{name}.py" in chosen, name
    assert "library/test_core_only.py" in chosen
    for name in ("test_cli_target", "test_runner", "test_record_format", "test_pot"):
        assert f"unit/{name}.py" not in chosen, name  # they import the tasks
    assert "unit/test_library_selection.py" in chosen  # this one too: it needs nothing beyond them
    assert not is_library_test(TESTS / "integration" / "test_quoted_commands.py")  # imports only pytest, runs tasks


def test_an_import_anywhere_counts_and_test_helpers_are_followed(tmp_path, monkeypatch):
    def outside(source: str) -> set[str]:
        path = tmp_path / f"test_case{len(list(tmp_path.glob('test_case*')))}.py"
        path.write_text(source)
        return set(outside_imports(path))

    assert outside("import torch\nfrom torch import nn\nimport fcpts\nfrom baselines import obs\nimport os") == set()
    assert outside("import pytest\n\ndef test_x():\n    pytest.importorskip('torchvision')") == set()
    assert outside("def test_x():\n    import torchvision") == {"torchvision"}
    assert outside("from tests.unit.tiny import tiny_net") == set()  # a helper that imports only torch
    assert outside("from tasks.grid import cli") == {"tasks.grid", "tasks.grid.cli"}
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "helper.py").write_text("import torch\n\ndef load():\n    import timm")
    monkeypatch.setattr(selection, "ROOT", tmp_path)  # a checkout whose test helper imports timm in a function
    assert outside("from tests.helper import load") == {"timm"}
    assert outside("import tests.helper") == {"timm"}


def test_library_only_collects_exactly_those_and_tox_runs_it():
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--library-only", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert collected.returncode == 0, collected.stdout[-2000:] + collected.stderr[-2000:]
    files = {line.split("::")[0] for line in collected.stdout.splitlines() if "::" in line}
    assert files == {p.relative_to(ROOT).as_posix() for p in library_tests()}
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    for env in ("testenv:core", "testenv:lowest"):
        assert "--library-only" in tox[env]["commands"], env
    assert "library" not in tox, "the library's tests are chosen by --library-only, not listed in tox.ini"
