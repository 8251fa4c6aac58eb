"""The per-step profile: runs of n and 2n steps differenced, so one step's host and device time, launches and
waits for the device are left, and on a GPU the source lines that made the host wait."""

import re
from collections import Counter

import pytest
import torch

from benchmarks.speed import step_profile
from tests.conftest import DEVICES


@pytest.mark.parametrize("device", DEVICES)
def test_one_steps_share_is_profiled_for_both_steps_and_written(tmp_path, capsys, device):
    out = tmp_path / "step_profile.txt"
    step_profile.main(["--model", "resnet20", "--batch-size", "4", "--steps", "1", "--device", device,
                       "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert out.read_text() == printed
    rows = dict(re.findall(r"^(plain step|fcpts step): host\s+(\d+\.\d+) ms", printed, re.M))
    assert set(rows) == {"plain step", "fcpts step"} and all(float(v) > 0 for v in rows.values())
    top = re.search(r"^fcpts host, most: (\S+) \d+\.\d+", printed, re.M)
    assert top, printed  # on a GPU a tiny model's eager step may spend its host time mostly in launch calls
    assert top.group(1).startswith("aten::") or device == "cuda"
    launches = re.search(r"^fcpts step: .*?(\d+) kernel launches", printed, re.M).group(1)
    if device == "cuda":
        assert int(launches) > 0 and re.search(r"^fcpts waits by source line: ", printed, re.M)
    else:
        assert launches == "0" and "waits by source line" not in printed


def test_a_step_costs_the_difference_of_two_runs_over_their_steps(monkeypatch):
    runs = iter(
        [
            {"calls": Counter(a=3, b=1), "host_ms": Counter(a=5.0)},
            {"calls": Counter(a=7, b=1), "host_ms": Counter(a=9.0)},
        ]
    )
    monkeypatch.setattr(step_profile, "profiled", lambda run, device: next(runs))
    share = step_profile.per_step(lambda n: None, 2, torch.device("cpu"))
    assert share["calls"] == {"a": 2, "b": 0} and share["host_ms"] == {"a": 2.0}  # b: once a run (set-up)
