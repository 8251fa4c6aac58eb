"""`python -m benchmarks`: every declared measurement's module has a `main(argv)`, and `--list` and each one's `--help`
answer without importing torch (at once)."""

import importlib
import subprocess
import sys

import pytest

from benchmarks import BENCHMARKS
from benchmarks.__main__ import main


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_each_declared_measurement_has_a_main(name):
    assert callable(importlib.import_module(BENCHMARKS[name].module).main)


def imports_torch(*argv: str) -> tuple[str, bool]:
    """(what `python -m benchmarks *argv` prints, whether it imported torch), in a fresh Python."""
    probe = f"from benchmarks.__main__ import main\ntry:\n    main({list(argv)!r})\nexcept SystemExit:\n    pass"
    probe += "\nimport sys\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
    return out, out.strip().endswith("True")


def test_list_names_every_measurement_and_imports_no_torch():
    out, torch = imports_torch("--list")
    assert all(name in out for name in BENCHMARKS) and not torch


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_each_measurement_answers_help_without_torch(name):
    out, torch = imports_torch(name, "--help")
    assert f"usage: python -m benchmarks {name}" in out and not torch


def test_an_unknown_name_is_refused_by_argparse(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["no-such-benchmark"])
    assert stop.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_an_unknown_method_is_one_line_and_exit_2_before_any_work(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["scale", "--methods", "fcpts", "bogus"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--methods: unknown method 'bogus'" in err and "Traceback" not in err
