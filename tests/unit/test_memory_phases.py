"""The phase log of the memory benchmark: each named function marks where it is entered and left, the originals
come back afterwards, and an allocation held inside a phase shows in that phase's peak."""

from __future__ import annotations

import sys
import types

import torch

from benchmarks.scale.memory_phases import PhaseLog, marked


def test_named_functions_mark_their_phases_and_are_restored(monkeypatch):
    module = types.ModuleType("fake_method")

    def allocate():
        x = torch.ones(64, 1024, 1024)  # 256 MB, held while the phase runs
        return float(x.sum())

    module.allocate = allocate
    monkeypatch.setitem(sys.modules, "fake_method", module)
    log = PhaseLog(every_s=0.001)
    with marked(log, (("fake_method", "allocate"),)):
        assert module.allocate is not allocate
        module.allocate()
    assert module.allocate is allocate
    log.close()
    rows = {name: (now, high) for name, now, high in log.rows}
    assert list(rows) == ["start", "allocate", "after allocate"]
    assert rows["allocate"][1] - rows["start"][0] > 200e6, "the held tensor is in the phase's peak"
