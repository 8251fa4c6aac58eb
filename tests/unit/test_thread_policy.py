"""The task entry points start torch with OMP_WAIT_POLICY=PASSIVE unless the user chose a policy."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import os, tasks.grid.evaluate, torch; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in dir())"


@pytest.mark.parametrize("given,expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_wait_policy_is_set_before_torch_starts(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given:
        env["OMP_WAIT_POLICY"] = given
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [expected, "True"]
