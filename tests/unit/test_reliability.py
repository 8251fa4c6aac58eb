"""No wrong record, ever: resume identity, exact record names, NaN inputs, corrupt checkpoints, concurrent
runs, early validation, logged resume, and a main job that leaves the repository clean."""

import logging
import multiprocessing
import re
import subprocess
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import fcpts
from fcpts.core.checkpoint import Checkpoint, CheckpointError
from fcpts.core.io import WriteFailed, atomic_write, save_torch_atomic
from tasks.grid.cli import main as task_main
from tasks.grid.profiles import Profile
from tasks.grid.records import read_record
from tasks.grid.runner import Grid, run_grid

ROOT = Path(__file__).resolve().parents[2]


def net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))


def images(n: int = 16) -> torch.Tensor:
    return torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def grid(tmp_path: Path, weights: str = "a", slow_s: float = 0.0, seed: int = 0) -> Grid:
    def evaluate(model):
        time.sleep(slow_s)
        return {"top1": 100.0 * float((model[0].weight == 0).float().mean()), "top5": 0.0}

    return Grid(
        task="t", dataset="d", model="m", build_model=lambda: net(seed),
        make_calibration=lambda n, augment: (images(n), {"n_images": n, "indices": list(range(n))}),
        evaluate=evaluate, profile=Profile("tiny", n_calibration=8, iterations=3, batch_size=4), seed=0,
        provenance={"weights": {"sha256": weights}}, runs_dir=tmp_path / "runs", progress=False,
    )  # fmt: skip


def test_models_with_equal_shapes_and_other_weights_never_share_a_checkpoint(tmp_path):
    ckpt = str(tmp_path / "run.pt")
    fcpts.sparsify(net(0), images(), 0.5, iterations=3, batch_size=4, progress=False, checkpoint=ckpt)
    with pytest.raises(CheckpointError, match="belongs to a different run"):
        fcpts.sparsify(net(1), images(), 0.5, iterations=3, batch_size=4, progress=False, checkpoint=ckpt)


def test_a_record_from_other_dense_weights_is_not_taken_for_this_cell(tmp_path):
    run_grid(grid(tmp_path, weights="a"), ["uniform"], [0.5], log=lambda _: None)
    with pytest.raises(ValueError, match="other dense weights"):
        run_grid(grid(tmp_path, weights="b"), ["uniform"], [0.5], log=lambda _: None)
    run_grid(grid(tmp_path, weights="b"), ["uniform"], [0.5], force=True, log=lambda _: None)


def test_close_targets_get_their_own_records(tmp_path):
    records = run_grid(grid(tmp_path), ["uniform"], [0.9, 0.904], log=lambda _: None)
    assert [r["target_sparsity"] for r in records] == [0.9, 0.904]
    names = sorted(p.name for p in (tmp_path / "runs/t/d/m").glob("*.json"))
    assert names == ["uniform-sp90-tiny-seed0.json", "uniform-sp90.4-tiny-seed0.json"]


@pytest.mark.parametrize("method", ["fcpts", "pot-l2norm"])
def test_nan_calibration_images_stop_the_run_with_a_named_error(method):
    x = images()
    x[3, 0, 2, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN or Inf"):
        fcpts.get_method(method)(net(), x, 0.5, iterations=2, progress=False)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_the_finiteness_check_finds_one_bad_value_and_passes_finite_sums_that_overflow(bad):
    from fcpts.core.calibration import all_finite

    x = torch.randn(4, 3, 8, 8)
    assert all_finite(x)
    x[2, 1, 3, 3] = bad
    assert not all_finite(x)
    both = torch.zeros(4)
    both[0], both[1] = float("inf"), -float("inf")  # their sum is NaN, not a number that looks finite
    assert not all_finite(both)
    assert all_finite(torch.full((4,), 3e38))  # finite values whose sum overflows to Inf
    assert all_finite(torch.full((8,), 60000.0, dtype=torch.float16))


def test_a_nan_dense_model_stops_the_run_naming_the_step():
    model = net()
    with torch.no_grad():  # finite weights (NaN/Inf ones are refused before the run), outputs that overflow
        model[3].weight.fill_(3e38)
    with pytest.raises(FloatingPointError, match="step 0"):
        fcpts.sparsify(model, images(), 0.5, iterations=2, batch_size=4, progress=False)


def test_a_truncated_checkpoint_names_its_file_and_force_starts_clean(tmp_path):
    g = grid(tmp_path)
    run_grid(g, ["fcpts"], [0.5], log=lambda _: None)
    ckpt = g.checkpoints() / "t/d/m/fcpts-sp50-tiny-seed0.pt"
    fcpts.sparsify(net(), images(8), 0.5, iterations=3, batch_size=4, progress=False, checkpoint=str(ckpt))
    ckpt.write_bytes(ckpt.read_bytes()[:100])  # a kill during a copy, a full disk
    (tmp_path / "runs/t/d/m/fcpts-sp50-tiny-seed0.json").unlink()
    with pytest.raises(CheckpointError, match=re.escape(str(ckpt)) + ".*--force"):
        run_grid(grid(tmp_path), ["fcpts"], [0.5], log=lambda _: None)
    (record,) = run_grid(grid(tmp_path), ["fcpts"], [0.5], force=True, log=lambda _: None)
    assert record["hit_target"]


def test_an_interrupted_force_redo_resumes_with_force_and_a_finished_one_starts_clean(tmp_path):
    (old,) = run_grid(grid(tmp_path), ["fcpts"], [0.5], log=lambda _: None)
    record = tmp_path / "runs/t/d/m/fcpts-sp50-tiny-seed0.json"
    before = record.read_bytes()
    calls = []

    def interrupted(model):  # the dense evaluation passes; the redo is stopped after its method finished
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {"top1": 1.0, "top5": 0.0}

    g = grid(tmp_path)
    g.evaluate = interrupted
    with pytest.raises(KeyboardInterrupt):
        run_grid(g, ["fcpts"], [0.5], force=True, log=lambda _: None)
    assert record.read_bytes() == before  # the record being redone stays until its replacement is written
    lines: list[str] = []
    (kept,) = run_grid(grid(tmp_path), ["fcpts"], [0.5], log=lines.append)  # without --force: skipped, and said
    assert kept == old and "--force resumes it" in lines[-1]
    (redone,) = run_grid(grid(tmp_path), ["fcpts"], [0.5], force=True, log=lines.append)
    assert redone["method_report"]["extra"]["resumed_from_step"] == 3 and "[resume]" in " ".join(lines)
    assert redone["mask_sha256"] == old["mask_sha256"]
    assert list((g.checkpoints() / "t/d/m").glob("fcpts-sp50-tiny-seed0.pt*")) == []  # the marker went too
    (again,) = run_grid(grid(tmp_path), ["fcpts"], [0.5], force=True, log=lambda _: None)
    assert again["method_report"]["extra"]["resumed_from_step"] == 0  # a finished redo: --force starts clean


def test_a_finished_cell_leaves_no_checkpoint_or_side_file(tmp_path):
    g = grid(tmp_path)
    (record,) = run_grid(g, ["str"], [0.5], log=lambda _: None)
    assert record["method_report"]["extra"]["trials"]  # STR searched, with its search state beside the checkpoint
    left = [p.name for p in (g.checkpoints() / "t/d/m").glob("str-sp50-tiny-seed0.pt*")]
    assert left == [], f"left behind after the record: {left}"


def test_a_run_resumed_on_another_device_names_both_in_its_record(tmp_path):
    g = grid(tmp_path)
    run_grid(g, ["fcpts"], [0.5], log=lambda _: None)
    (tmp_path / "runs/t/d/m/fcpts-sp50-tiny-seed0.json").unlink()
    ckpt = g.checkpoints() / "t/d/m/fcpts-sp50-tiny-seed0.pt"  # an interrupted part, as if it ran on a GPU
    fcpts.sparsify(net(), images(8), 0.5, iterations=3, batch_size=4, progress=False, checkpoint=str(ckpt))
    ckpt.with_name(ckpt.name + ".devices").write_text("cuda: NVIDIA H200\n")
    (record,) = run_grid(grid(tmp_path), ["fcpts"], [0.5], log=lambda _: None)
    assert record["method_report"]["extra"]["resumed_from_step"] == 3
    first, here = record["device"].split("; ")
    assert first == "cuda: NVIDIA H200" and here.startswith("cpu: ")
    assert list(ckpt.parent.glob(ckpt.name + "*")) == []  # the side file goes with the checkpoint


def test_a_start_that_left_no_checkpoint_does_not_count_its_device(tmp_path):
    g = grid(tmp_path)
    side = tmp_path / "runs/.checkpoints/t/d/m/fcpts-sp50-tiny-seed0.pt.devices"
    side.parent.mkdir(parents=True)
    side.write_text("cuda: NVIDIA H200\n")  # a start on a GPU that crashed before its first checkpoint
    (record,) = run_grid(g, ["fcpts"], [0.5], log=lambda _: None)
    assert record["device"].startswith("cpu: ") and ";" not in record["device"]
    assert g.checkpoints() / "t/d/m" == side.parent and not side.exists()


def _run_cell(folder: str, queue) -> None:
    lines: list[str] = []
    records = run_grid(grid(Path(folder), slow_s=1.0), ["uniform"], [0.5], log=lines.append)
    queue.put((len(records), lines))


def test_two_processes_on_one_cell_end_with_one_record_and_no_crash(tmp_path):
    ctx = multiprocessing.get_context("spawn")  # no fork of an initialised OpenMP pool
    queue = ctx.Queue()
    procs = [ctx.Process(target=_run_cell, args=(str(tmp_path), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    results = [queue.get(timeout=5) for _ in procs]
    record = read_record(tmp_path / "runs/t/d/m/uniform-sp50-tiny-seed0.json")
    assert record is not None and record["hit_target"]
    # the second one either found the finished record or skipped the busy cell, saying who held it
    assert sum(n for n, _ in results) >= 1
    assert not list((tmp_path / "runs").rglob("*.lock")) and not list((tmp_path / "runs").rglob("*.tmp"))


def test_a_bad_target_fails_before_any_cell_runs(tmp_path, capsys):

    with pytest.raises(SystemExit) as stop:
        task_main("cifar", ["--methods", "uniform", "--sparsity", "0.5", "1.2", "--results-dir", str(tmp_path)])
    assert stop.value.code == 2 and "got 1.2" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.json"))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        run_grid(grid(tmp_path), ["uniform"], [0.5, 1.2], log=lambda _: None)
    assert not list(tmp_path.rglob("*.json"))


def test_checkpoints_are_saved_by_steps_and_resume_is_logged(tmp_path, monkeypatch, caplog):
    saved: list[int] = []
    real_save = Checkpoint.save

    def spy(self, state, step=0, progress=None):
        saved.append(step)
        real_save(self, state, step, progress)

    monkeypatch.setattr(Checkpoint, "save", spy)
    ckpt = str(tmp_path / "run.pt")
    options = dict(iterations=6, batch_size=4, progress=False, checkpoint=ckpt, checkpoint_every_steps=2)
    fcpts.sparsify(net(), images(), 0.5, **options)
    assert saved == [2, 4, 6]
    with caplog.at_level(logging.INFO, logger="fcpts"):
        fcpts.sparsify(net(), images(), 0.5, **options)
    assert f"from step 6 ({ckpt})" in caplog.text and "resuming fcpts" in caplog.text


@pytest.mark.parametrize(
    "target, record",
    [
        ("run", "cifar/cifar10/resnet56/fcpts-sp90-fast-seed0.json"),
        ("run-mmdet", "voc/voc-cifar10/mmdet-ssdlite_mobilenetv2_voc-cifar10-160/fcpts-sp90-cpu-seed0.json"),
    ],
)
def test_the_main_jobs_write_where_git_does_not_track(target, record):
    run = re.search(rf"^{target}:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    results_dir = re.search(r"--results-dir (\S+)", run).group(1)
    record = f"{results_dir}/{record}"
    ignored = subprocess.run(["git", "check-ignore", "-q", record], cwd=ROOT)
    assert ignored.returncode == 0, f"make {target} would write {record}, which git tracks"


def test_a_command_names_the_commit_it_started_from(monkeypatch):
    """A record written at the end of an hour-long command names the code that ran, not a commit made meanwhile."""
    from tasks.grid import cli, records

    head = {"hash": "start"}

    def fake_git(args, **_):
        out = head["hash"] if args[1] == "rev-parse" else ""
        return subprocess.CompletedProcess(args, 0, stdout=out, stderr="")

    records.git_commit.cache_clear()
    monkeypatch.setattr(records.subprocess, "run", fake_git)
    seen = []

    def command() -> int:
        head["hash"] = "committed-while-running"
        seen.append(records.git_commit())
        return 0

    try:
        assert cli.run_main(command) == 0
    finally:
        records.git_commit.cache_clear()
    assert seen == ["start"]


def test_a_copy_without_git_records_the_commit_it_claims_or_unknown(monkeypatch):
    from tasks.grid import records

    def no_git(args, **_):
        raise subprocess.CalledProcessError(128, args, "", "fatal: not a git repository")

    monkeypatch.setattr(records.subprocess, "run", no_git)
    monkeypatch.delenv("FCPTS_GIT_COMMIT", raising=False)
    assert records.git_commit.__wrapped__() == "unknown"
    monkeypatch.setenv("FCPTS_GIT_COMMIT", "abc123")
    assert records.git_commit.__wrapped__() == "abc123 (no git checkout; from $FCPTS_GIT_COMMIT)"


def _fails(error: Exception):
    def write(f):
        raise error

    return write


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), RuntimeError("unexpected pos 64 vs 0")])
def test_a_write_that_fails_names_the_file_and_a_full_disk(tmp_path, error):
    """torch.save on a full disk says "unexpected pos", naming neither the cause nor the file."""
    path = tmp_path / "model.pt"
    with pytest.raises(WriteFailed, match=re.escape(str(path)) + r".*disk full\?") as failed:
        atomic_write(path, _fails(error))
    assert isinstance(failed.value, ValueError) and isinstance(failed.value, OSError)
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_a_folder_on_the_path_that_is_a_file_is_named(tmp_path):
    (tmp_path / "models").write_text("")
    with pytest.raises(WriteFailed, match=re.escape(str(tmp_path / "models" / "m.pt")) + ".*is a file"):
        save_torch_atomic({}, tmp_path / "models" / "m.pt")
