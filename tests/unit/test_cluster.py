"""Grids on a cluster through submitit: one job per cell, the same records as a local run, status, resubmission.

The jobs run the real CIFAR task on a tiny CIFAR-shaped folder made here (64 training and 32 test images, a
randomly initialised ResNet-20), so nothing needs the shared data. One cell fails at run time for real: the
training-loop methods get `block_names=["nope"]`, a well-formed option (so the launcher submits) that only FCPTS
reads, against the model, once it runs, while the one-shot `uniform` cell is unaffected.
"""

from __future__ import annotations

import io
import json
import lzma
import os
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tasks.grid import status
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.cli import main as task_main
from tasks.grid.launch import cell_argv
from tasks.grid.records import read_record
from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def submitit():
    """submitit is in the `test` extra: CI must test the launcher, a user's older environment skips it."""
    if IN_CI:
        import submitit

        return submitit
    return pytest.importorskip("submitit", reason="pip install -e '.[cluster]'")


@pytest.fixture(scope="module")
def tiny_cifar(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny-cifar")
    rng = np.random.default_rng(0)
    (root / "cifar10").mkdir()
    for split, n in (("train", 64), ("test", 32)):
        buffer = io.BytesIO()
        np.savez(buffer, x=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), y=rng.integers(0, 10, n))
        (root / "cifar10" / f"{split}.npz.xz").write_bytes(lzma.compress(buffer.getvalue()))
    (root / "weights" / "cifar10").mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(cifar_resnet("resnet20").state_dict(), root / "weights" / "cifar10" / "resnet20.th")
    return root


def grid_argv(data: Path, runs: Path, *launcher: str) -> list[str]:
    return [
        "--data-root", str(data), "--model", "resnet20", "--profile", "quick", "--methods", "uniform", "fcpts",
        "--sparsity", "0.5", "--option", 'block_names=["nope"]', "--results-dir", str(runs), "--no-progress", *launcher,
    ]  # fmt: skip


def record(runs: Path, method: str) -> Path:
    return runs / "cifar" / "cifar10" / "resnet20" / f"{method}-sp50-quick-block_names['nope']-seed0.json"


def test_a_cell_command_is_the_grid_command_narrowed_to_that_cell():
    argv = ["--models", "a", "b", "--all-methods", "--sparsity=0.5", "--seed", "-1", "--launcher", "submitit",
            "--cluster", "slurm", "--no-wait", "--option", "lr=0.1", "--array-parallelism", "4", "--sparsity", "0.6",
            "0.7"]  # fmt: skip
    assert cell_argv(argv, "fcpts", 0.904, ("--models", "b")) == [
        "--seed", "-1", "--option", "lr=0.1", "--methods", "fcpts", "--sparsity", "0.904", "--models", "b",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="spell out --meth"):
        cell_argv(["--meth", "fcpts"], "fcpts", 0.5)


def test_launcher_flags_are_checked_before_anything_runs(tmp_path, capsys, monkeypatch):
    base = ["--data-root", str(tmp_path / "absent"), "--results-dir", str(tmp_path)]
    assert task_main("cifar", [*base, "--cluster", "local"]) == 2
    assert "--cluster only apply with --launcher submitit" in capsys.readouterr().err
    assert task_main("cifar", [*base, "--launcher", "submitit", "--cluster", "local", "--array-parallelism", "2"]) == 2
    assert "--array-parallelism only apply with --cluster slurm" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if it were not installed
    assert task_main("cifar", [*base, "--launcher", "submitit", "--cluster", "local"]) == 2
    assert "pip install -e '.[cluster]'" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.json"))


def test_local_jobs_one_failing_then_status_then_only_the_failed_cell_again(
    tiny_cifar, tmp_path, capsys, monkeypatch, submitit
):
    monkeypatch.chdir(ROOT)  # the jobs run `python -m tasks.cifar` from here, like a user would
    runs, jobs = tmp_path / "runs", tmp_path / "jobs"
    argv = grid_argv(tiny_cifar, runs, "--launcher", "submitit", "--cluster", "local", "--jobs-dir", str(jobs))

    assert task_main("cifar", argv) == 1  # both cells ran in parallel; one failed
    out = capsys.readouterr().out
    done = read_record(record(runs, "uniform"))
    assert done is not None and read_record(record(runs, "fcpts")) is None
    cell = cell_argv(grid_argv(tiny_cifar, runs), "uniform", 0.5, ("--models", "resnet20"))  # `--model` dropped
    assert done["command"] == " ".join(["python", "-m", "tasks.cifar", *cell])  # the per-cell command
    assert "[done] cifar/cifar10/resnet20/uniform-sp50" in out
    failed = next(line for line in out.splitlines() if line.startswith("[failed]"))
    assert "fcpts-sp50" in failed and "block_names not found in the model" in failed
    log = Path(out.split("log: ", 1)[1].split()[0])
    assert log.is_file() and "block_names not found" in log.read_text()

    assert status.main(["--results-dir", str(runs), "--jobs-dir", str(jobs)]) == 0
    table = capsys.readouterr().out
    assert "2 cells: 1 done, 0 running, 1 failed, 0 missing" in table
    assert next(line for line in table.splitlines() if "fcpts-sp50" in line).startswith("failed")

    assert task_main("cifar", argv) == 1  # the same command again: only the failed cell is submitted
    out = capsys.readouterr().out
    assert "[skip] cifar/cifar10/resnet20/uniform-sp50" in out
    submitted = [line for line in out.splitlines() if line.startswith("[submitted]")]
    assert len(submitted) == 1 and "fcpts-sp50" in submitted[0]
    manifest = json.loads(next(jobs.rglob("submission.json")).read_text())
    assert {c["method"]: c["command"] for c in manifest["cells"]}["fcpts"].endswith(
        "--methods fcpts --sparsity 0.5 --models resnet20"
    )
    assert not list(runs.rglob("*.lock"))


FAKE_SLURM = {
    "srun": "exit 0",
    "sbatch": 'cp "$1" "$FAKE_SLURM/job.sh"; echo "$1" >> "$FAKE_SLURM/calls"; echo "Submitted batch job 4242"',
    "sacct": 'printf "JobID|State|NodeList\\n4242_0|PENDING|\\n4242_1|RUNNING|node7\\n"',
}


def test_slurm_array_with_the_commands_resources_and_no_double_submission(
    tiny_cifar, tmp_path, capsys, monkeypatch, submitit
):
    """Against stand-ins for sbatch/sacct: the array's #SBATCH lines, status of queued and running cells, and a
    re-run that leaves cells with a live job alone."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKE_SLURM.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(tmp_path))
    runs = tmp_path / "runs"
    launcher = "--launcher submitit --slurm-partition gpu --gpus-per-node 1 --cpus-per-task 4 --mem-gb 8"
    argv = grid_argv(tiny_cifar, runs, *shlex.split(launcher), "--timeout-min", "30", "--array-parallelism", "2")

    assert task_main("cifar", [*argv, "--no-wait"]) == 0
    script = (tmp_path / "job.sh").read_text()
    for line in ("--partition=gpu", "--array=0-1%2", "--gpus-per-node=1", "--cpus-per-task=4", "--mem=8GB"):
        assert f"#SBATCH {line}" in script
    assert "#SBATCH --time=30" in script
    capsys.readouterr()

    assert status.main(["--results-dir", str(runs)]) == 0  # jobs dir: <results-dir>/.jobs
    table = capsys.readouterr().out
    assert "PENDING" in table and "RUNNING" in table and "2 cells: 0 done, 2 running" in table

    assert task_main("cifar", [*argv, "--no-wait"]) == 0
    assert "not submitted again" in capsys.readouterr().out
    assert len((tmp_path / "calls").read_text().splitlines()) == 1


def test_a_lock_names_its_job_and_only_that_job_releases_it(tmp_path, monkeypatch):
    """A job killed by the scheduler (timeout) leaves its lock on another host; the launcher removes it before the
    cell is submitted again, but only when it is that job's."""
    from tasks.grid.status import JOB_ENV, CellBusy, cell_lock, release_lock_of_job

    cell, lock = tmp_path / "cell.json", tmp_path / "cell.json.lock"
    monkeypatch.setenv(JOB_ENV, "4242_1")
    with cell_lock(cell):
        assert json.loads(lock.read_text())["job"] == "4242_1"
    lock.write_text(json.dumps({"pid": 1, "host": "node7", "job": "4242_1"}))  # the job died on another node
    with pytest.raises(CellBusy, match=r"on node7 \(job 4242_1\)"), cell_lock(cell):
        pass
    assert not release_lock_of_job(cell, "4242_0") and lock.exists()
    assert release_lock_of_job(cell, "4242_1") and not lock.exists()
