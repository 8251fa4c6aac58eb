"""The step-time benchmark: FCPTS steps paired with plain steps, ratios printed and written with provenance."""

import re
from collections import Counter

import pytest
import torch

from benchmarks.speed import step_time
from tests.unit.test_step_graph import forced_on_this_cpu, stand_in_capture


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


def test_several_rounds_print_the_spread_of_their_ratios(capsys):
    """Each round is an FCPTS run of its own: the lowest and highest round medians bound the pooled median."""
    step_time.main(["--model", "resnet20", "--batch-size", "4", "--steps", "2", "--rounds", "2", "--device", "cpu"])
    printed = capsys.readouterr().out
    rows = re.findall(r"^fcpts step, (.+?)\s*: .* ratio (\d+\.\d+), rounds (\d+\.\d+) to (\d+\.\d+)$", printed, re.M)
    assert [name for name, *_ in rows] == ["mse-blocks (defaults)", "kl"]
    assert all(float(low) <= float(ratio) <= float(high) for _, ratio, low, high in rows)
    assert "rounds: the lowest and highest of the rounds' medians" in printed


def test_an_imagenet_architecture_is_timed_at_224_px_and_a_cifar_resnet_at_32():
    model, size, classes = step_time.model_and_images("resnet18")
    assert (size, classes) == (224, 1000) and model.fc.out_features == 1000
    model, size, classes = step_time.model_and_images("resnet20")
    assert (size, classes) == (32, 10) and model.linear.out_features == 10


def capture_plain_and_fcpts(replayed: list[str]):
    """A stand-in CUDA graph capture on this CPU: a replay reruns the recorded step (FCPTS's, or the plain step's
    and its teacher's), noting what it replayed."""
    fcpts_capture = stand_in_capture([])

    def capture(work, step, static_x):
        if not isinstance(getattr(work, "__self__", None), step_time.PlainStep):
            replay, out = fcpts_capture(work, step, static_x)
            return (lambda: (replay(), replayed.append("fcpts"))), out

        def replay() -> None:
            work(step, static_x)
            replayed.append(work.__name__)

        return replay, None

    return capture


def test_where_fcpts_replays_from_a_graph_the_plain_step_and_teacher_it_is_paired_with_replay_too(capsys, monkeypatch):
    replayed: list[str] = []
    forced_on_this_cpu(monkeypatch, capture_plain_and_fcpts(replayed))
    step_time.main(["--model", "resnet20", "--batch-size", "4", "--steps", "1", "--rounds", "1", "--device", "cpu"])
    printed = capsys.readouterr().out
    names = re.findall(r"^fcpts step, (.+?)\s*: .* ratio \d+\.\d+$", printed, re.M)
    assert names == ["mse-blocks (defaults)", "kl", "mse-blocks (defaults), eager", "kl, eager"]
    assert "replayed from a CUDA graph where FCPTS's is" in printed.splitlines()[0]
    floors = re.findall(r"^teacher forward alone \(no gradient, batch statistics\), (\w+): ", printed, re.M)
    assert floors == ["replayed", "eager"]
    # Only the two replayed configurations replay. Each: the plain step and teacher replay at the warm-up's last
    # call (the capture) and in each of FCPTS's 5 batch fetches (on a CPU the pairs run inside them); FCPTS
    # replays its 2 steps after its 3 eager ones.
    assert Counter(replayed) == {"_forward_backward": 2 * 6, "_teacher_forward": 2 * 6, "fcpts": 2 * 2}


def test_a_plain_step_that_cannot_be_captured_stops_the_benchmark_instead_of_timing_eager_steps(monkeypatch):
    def failing(work, step, static_x):
        raise RuntimeError("operation not permitted when stream is capturing")

    forced_on_this_cpu(monkeypatch, failing)
    model, _, _ = step_time.model_and_images("resnet20")
    x, y = torch.randn(4, 3, 32, 32), torch.zeros(4, dtype=torch.long)
    with pytest.raises(RuntimeError, match="the plain step was to replay from a CUDA graph but runs eager"):
        step_time.paired_step_times(model, x, y, 1)
