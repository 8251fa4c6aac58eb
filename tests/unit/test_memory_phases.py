"""The phase log of the memory benchmark: each named function marks where it is entered and left, the originals
come back afterwards, and an allocation held inside a phase shows in that phase's peak."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tasks.grid.paths import REPO_ROOT

# In a fresh interpreter: a long test process's allocator may serve the block from memory already resident.
SCRIPT = """
import json, sys, time, types
import torch
from benchmarks.scale.memory_phases import PhaseLog, marked

module = types.ModuleType("fake_method")

def allocate():
    block = torch.ones(64 * 2**20)  # 256 MiB, touched and held while the phase runs
    time.sleep(0.05)
    return float(block.sum())

module.allocate = allocate
sys.modules["fake_method"] = module
log = PhaseLog(every_s=0.001)
with marked(log, (("fake_method", "allocate"),)):
    wrapped = module.allocate is not allocate
    module.allocate()
restored = module.allocate is allocate
log.close()
print(json.dumps({"wrapped": wrapped, "restored": restored, "rows": log.rows}))
"""


def test_named_functions_mark_their_phases_and_are_restored():
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["wrapped"] and out["restored"]
    rows = {name: (now, high) for name, now, high in out["rows"]}
    assert list(rows) == ["start", "allocate", "after allocate"]
    assert rows["allocate"][1] - rows["start"][0] > 200 * 2**20, "the held tensor is in the phase's peak"
    assert rows["after allocate"][1] - rows["start"][0] < 100 * 2**20, "freed, so not in the next phase's peak"
