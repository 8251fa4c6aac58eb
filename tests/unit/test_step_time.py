"""The step-time benchmark: FCPTS steps paired with plain steps, ratios printed and written with provenance."""

import re

from benchmarks.speed import step_time


def test_pairs_every_fcpts_step_with_a_plain_step_and_writes_its_output(tmp_path, capsys):
    out = tmp_path / "step_time.txt"
    step_time.main(["--model", "resnet20", "--batch-size", "4", "--steps", "1", "--rounds", "1", "--device", "cpu",
                    "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert out.read_text() == printed
    ratios = re.findall(r"^fcpts step, (.+?)\s*: .* ratio (\d+\.\d+)$", printed, re.M)
    assert [name for name, _ in ratios] == ["mse-blocks (defaults)", "kl"]
    assert all(float(r) > 0 for _, r in ratios)
    assert "command: " in printed and "commit " in printed
