"""`python -m benchmarks`: every declared measurement's module has a `main(argv)`, and `--list` names them all
without importing torch (it answers at once)."""

import importlib
import subprocess
import sys

import pytest

from benchmarks import BENCHMARKS
from benchmarks.__main__ import main


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_each_declared_measurement_has_a_main(name):
    assert callable(importlib.import_module(BENCHMARKS[name].module).main)


def test_list_names_every_measurement_and_imports_no_torch():
    probe = "import sys\nfrom benchmarks.__main__ import main\nmain(['--list'])\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert all(name in out for name in BENCHMARKS) and out.strip().endswith("False")


def test_an_unknown_name_is_refused_by_argparse(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["no-such-benchmark"])
    assert stop.value.code == 2 and "invalid choice" in capsys.readouterr().err
