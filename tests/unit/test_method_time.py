"""The method-time benchmark: whole runs of each method alternate with FCPTS runs; ratios and per-step times
(ramp steps apart) are printed and written with provenance."""

import re

from benchmarks.speed import method_time


def test_alternates_runs_and_splits_the_ramp_steps(tmp_path, capsys):
    out = tmp_path / "method_time.txt"
    method_time.main(["--model", "resnet20", "--images", "8", "--batch-size", "4", "--iterations", "4",
                      "--rounds", "2", "--device", "cpu", "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert out.read_text() == printed
    rows = dict(re.findall(r"^(\S+)\s*: run .* ratio to fcpts (\d+\.\d+);", printed, re.M))
    assert set(rows) == {"fcpts", "fcpts-plus"}
    assert float(rows["fcpts"]) == 1.0 and float(rows["fcpts-plus"]) > 0
    assert re.search(r"^fcpts-plus .* in its ramp \(2 steps\); runs \d+\.\d, \d+\.\d s$", printed, re.M)  # ramp: half
    assert "command: " in printed and "commit " in printed
