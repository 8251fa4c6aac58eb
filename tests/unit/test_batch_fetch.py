"""The batch-fetch benchmark: the host's share of a step at ImageNet size, both finiteness checks timed."""

import re

from benchmarks.speed import batch_fetch


def test_times_the_batch_and_both_finiteness_checks_and_writes_its_output(tmp_path, capsys):
    out = tmp_path / "batch_fetch.txt"
    batch_fetch.main(["--batch-size", "4", "--size", "32", "--rounds", "2", "--out", str(out)])
    printed = capsys.readouterr().out
    assert out.read_text() == printed
    times = dict(re.findall(r"^(.+?)\s*:\s+(\d+\.\d+) ms$", printed, re.M))
    assert set(times) == {
        "Calibration.batch (index, stack, checks)",
        "stack alone",
        "finiteness, element-wise (before)",
        "finiteness, one sum (all_finite)",
    }
    assert re.search(r"^finiteness check: \d+\.\dx faster as one sum$", printed, re.M)
    assert "command: " in printed and "commit " in printed
