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
    teacher = re.search(r"^teacher forward alone .*: +(\d+\.\d+) ms, (\d+\.\d+) of the plain step .* below (\d+\.\d+)$",
                        printed, re.M)  # fmt: skip
    assert teacher and float(teacher.group(1)) > 0
    assert teacher.group(3) == f"{1 + float(teacher.group(2)):.2f}"
    assert "command: " in printed and "commit " in printed


def test_an_imagenet_architecture_is_timed_at_224_px_and_a_cifar_resnet_at_32():
    model, size, classes = step_time.model_and_images("resnet18")
    assert (size, classes) == (224, 1000) and model.fc.out_features == 1000
    model, size, classes = step_time.model_and_images("resnet20")
    assert (size, classes) == (32, 10) and model.linear.out_features == 10
