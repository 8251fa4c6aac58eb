"""The GPU check's CPU dry run: `prepare` then `run --dry-run` on a tiny random CIFAR-10, so the one command meant
for a rare GPU slot cannot rot between slots: every part's command line still parses and runs, the parts' time
limits hold, failures are reported per part, and the summary and the packed folder come back."""

import json
import os
import sys
import tarfile

import numpy as np
import pytest
import torch

from benchmarks.scale import gpu_check
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.paths import REPO_ROOT


def tiny_source(root):
    """A data root with random CIFAR-10 splits and freshly initialised ResNet-32/56 weights (akamaster's format)."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 300), ("test", 200)):
        x = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        gpu_check.write_npz_xz(root / "cifar10" / f"{split}.npz.xz", {"x": x, "y": rng.integers(0, 10, n)})
    (root / "weights" / "cifar10").mkdir(parents=True)
    for model in gpu_check.WEIGHTS:
        state = {f"module.{k}": v for k, v in cifar_resnet(model).state_dict().items()}
        torch.save({"state_dict": state}, root / "weights" / "cifar10" / f"{model}.th")
    return root


def test_prepare_copies_a_subset_that_reads_back(tmp_path):
    from tasks.grid.cifar_data import load_cifar

    info = gpu_check.prepare(tiny_source(tmp_path / "src"), tmp_path / "data", n_train=64, n_test=32)
    x_train, _ = load_cifar(tmp_path / "data", "cifar10", "train")
    x_test, y_test = load_cifar(tmp_path / "data", "cifar10", "test")
    src_x, src_y = load_cifar(tmp_path / "src", "cifar10", "test")
    assert (
        x_train.shape == (64, 32, 32, 3) and np.array_equal(x_test, src_x[:32]) and np.array_equal(y_test, src_y[:32])
    )
    assert info["train"] == 64 and info["bytes"] > 0 and info["travel_bytes"] >= info["bytes"]
    assert (tmp_path / "data" / "weights" / "cifar10" / "resnet56.th").is_file()


@pytest.mark.slow
def test_dry_run_runs_every_part_and_packs_its_output(tmp_path):
    data = tmp_path / "data"
    gpu_check.prepare(tiny_source(tmp_path / "src"), data, n_train=256, n_test=64)
    out = tmp_path / "out"
    code = gpu_check.main(["run", "--out", str(out), "--data-root", str(data), "--dry-run"])
    summary = json.loads((out / "summary.json").read_text())
    results = summary["parts"]
    assert summary["git_commit"] and summary["dry_run"] and summary["device"] == "cpu"
    assert [r["part"] for r in results] == [p.name for p in gpu_check.part_list(out, True, "cpu")]
    failed = {
        r["part"]: (out / "work" / f"{r['part']}.log").read_text()[-2000:] for r in results if r["status"] != "passed"
    }
    assert code == 0 and not failed, failed
    found = [json.loads(p.read_text()) for p in (out / "work" / "records").rglob("*.json")]
    records = [r for r in found if isinstance(r, dict) and "method_options" in r]
    assert sorted((r["model"], r["method"]) for r in records) == [
        ("resnet32", "fcpts"),
        ("resnet32", "pot-l2norm"),
        ("resnet56", "fcpts"),
        ("resnet56", "fcpts"),
    ]
    assert sorted(str(r["method_options"].get("amp")) for r in records) == ["None", "None", "None", "bf16"]
    assert all(r["git_commit"] != "unknown" for r in records)
    scale = json.loads((out / "work" / "scale.json").read_text())
    assert [c["status"] for c in scale["cells"]] == ["ok"]
    summary = (out / "summary.txt").read_text()
    assert "CPU dry run" in summary and f"{len(results)} of {len(results)} parts passed" in summary
    with tarfile.open(out / "gpu_check.tar.gz") as tar:
        names = tar.getnames()
    assert "gpu_check/step_time.txt" in names and "gpu_check/scale.md" in names


def test_a_part_past_its_limit_is_stopped_and_the_rest_still_run(tmp_path):
    slow = gpu_check.Part("slow", [sys.executable, "-c", "import time; time.sleep(30)"], 1)
    fast = gpu_check.Part("fast", [sys.executable, "-c", "print('ok')"], 1)
    log = tmp_path / "slow.log"
    assert gpu_check.run_part(slow, 0.5, log, dict(os.environ))["status"].startswith("timed out")
    assert gpu_check.run_part(fast, 5, tmp_path / "fast.log", dict(os.environ))["status"] == "passed"
    assert "time.sleep" in log.read_text()


def test_run_without_data_names_the_prepare_step(tmp_path):
    with pytest.raises(SystemExit, match="gpu-check prepare"):
        gpu_check.main(["run", "--out", str(tmp_path / "out"), "--data-root", str(tmp_path / "none"), "--dry-run"])


def test_a_second_call_continues_from_the_first_ones_packed_work(tmp_path):
    first = tmp_path / "first" / "work"
    cell = first / "records" / "cifar" / "cifar10" / "resnet32"
    cell.mkdir(parents=True)
    (cell / "fcpts-sp80-paper-seed0.json.lock").write_text("12345")  # its process ended with the first call
    (first.parent / "ckpt").mkdir()
    (first / "records" / ".checkpoints").mkdir()
    (first / "records" / ".checkpoints" / "pot.pt").write_bytes(b"state")
    (first / "scale.json").write_text("{}")
    with tarfile.open(tmp_path / "gpu_check.tar.gz", "w:gz") as tar:
        tar.add(first, arcname="gpu_check")
    work = tmp_path / "second" / "work"
    work.mkdir(parents=True)
    gpu_check.continue_work(tmp_path / "gpu_check.tar.gz", work)
    assert (work / "records" / ".checkpoints" / "pot.pt").read_bytes() == b"state" and (work / "scale.json").is_file()
    assert not list(work.rglob("*.lock")) and sorted(p.name for p in work.parent.iterdir()) == ["work"]
    with pytest.raises(SystemExit, match="no summary.json, records/ or scale.json"):
        gpu_check.continue_work(tmp_path / "second" / "nothing", work)
    assert "--resume" in next(p for p in gpu_check.part_list(tmp_path, False, "cuda") if p.name == "scale").command


def test_budgets_that_do_not_fit_one_call_run_in_order_and_the_last_part_takes_the_rest():
    total = 300  # budgets 50, 100 and 400 s: 550 s of parts in a 300-s call
    assert gpu_check.part_limit(50, [100, 400], 550, left=300, total_s=total) == 50
    assert gpu_check.part_limit(100, [400], 550, left=250, total_s=total) == 100
    assert gpu_check.part_limit(400, [], 550, left=150, total_s=total) == 150  # the last: all that remains
    assert gpu_check.part_limit(100, [400], 550, left=0.5, total_s=total) == 0.5  # < 1 s: not started
    # budgets that fit: shares of the total, an early finish's leftover going on to the next part
    assert gpu_check.part_limit(50, [100, 400], 550, left=1100, total_s=1100) == 100
    assert gpu_check.part_limit(100, [400], 550, left=1090, total_s=1100) == 290


def test_a_continued_call_does_not_run_again_what_passed(tmp_path):
    data = tmp_path / "data"
    gpu_check.prepare(tiny_source(tmp_path / "src"), data, n_train=64, n_test=32)
    work = tmp_path / "first" / "work"
    work.mkdir(parents=True)
    (work / "summary.json").write_text(
        json.dumps({"git_commit": "x", "parts": [{"part": "smoke", "status": "passed", "seconds": 3.0, "limit_s": 9}]})
    )
    out = tmp_path / "second"
    args = ["run", "--out", str(out), "--data-root", str(data), "--dry-run", "--only", "smoke", "--continue-from"]
    assert gpu_check.main([*args, str(work)]) == 0
    (smoke,) = json.loads((out / "summary.json").read_text())["parts"]
    assert smoke["status"] == "passed in an earlier call" and not (out / "work" / "smoke.log").exists()


def test_the_run_names_the_prepared_commit_only_while_its_files_are_unchanged(tmp_path, monkeypatch):
    """A device may get the working tree beside an older git folder: the commit `prepare` wrote down names the
    code while the files it listed are as they were, and not once one of them changed."""
    (tmp_path / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(gpu_check, "REPO_ROOT", tmp_path)
    prepared = {"commit": "abc", "files": ["a.py"], "tree_sha256": gpu_check.tree_digest(["a.py"])}
    assert gpu_check.sent_commit(prepared) == "abc"
    (tmp_path / "a.py").write_text("x = 2\n")
    assert gpu_check.sent_commit(prepared) is None
    assert gpu_check.sent_commit({"commit": "abc"}) is None  # prepared before the files were listed


def test_the_docs_quote_the_parts_and_their_budgets(tmp_path):
    parts = gpu_check.part_list(tmp_path, False, "cuda")
    total = sum(p.budget_s for p in parts)
    notebook = " ".join((REPO_ROOT / "docs" / "notebook" / "benchmarks.md").read_text().split())
    tasks_doc = " ".join((REPO_ROOT / "docs" / "tasks.md").read_text().split())
    assert f"They come to {total:.0f} s" in notebook and f"budgets add up to {total:.0f} s" in tasks_doc
    for p in parts:
        if p.name not in ("r56-fp32", "r56-bf16"):
            assert f"| {p.name} |" in notebook and f"| {p.budget_s:.0f} |" in notebook, p.name


def test_a_scale_part_that_left_cells_not_started_is_run_again(tmp_path):
    scale_json = tmp_path / "scale.json"
    scale_json.write_text(json.dumps({"cells": [{"status": "ok"}, {"status": "skipped"}, {"status": "skipped"}]}))
    passed = {"part": "scale", "status": "passed", "seconds": 1.0, "limit_s": 2}
    assert gpu_check.scale_status(passed, scale_json)["status"] == "incomplete: 2 cells not started"
    scale_json.write_text(json.dumps({"cells": [{"status": "ok"}]}))
    assert gpu_check.scale_status(passed, scale_json) == passed
    timed_out = {**passed, "status": "timed out after 2 s"}
    assert gpu_check.scale_status(timed_out, scale_json) == timed_out


def test_the_committed_gpu_cells_are_merged_only_on_the_gpu_that_measured_them(tmp_path, monkeypatch):
    from benchmarks.scale import scale

    out = tmp_path / "scale_cuda.json"
    out.write_text(json.dumps({"device_description": "cuda: NVIDIA H200"}))
    assert not gpu_check.same_gpu(out, "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(scale, "device_description", lambda device: "cuda: NVIDIA H200")
    assert gpu_check.same_gpu(out, "cuda") and not gpu_check.same_gpu(tmp_path / "none.json", "cuda")
    monkeypatch.setattr(scale, "device_description", lambda device: "cuda: NVIDIA A100-SXM4-80GB")
    assert not gpu_check.same_gpu(out, "cuda")
    scale_part = next(p for p in gpu_check.part_list(tmp_path, False, "cuda") if p.name == "scale")
    assert "--paper-grid" in scale_part.command and "--merge" not in scale_part.command  # another GPU: all 27
    monkeypatch.setattr(gpu_check, "SCALE_CUDA", out)
    monkeypatch.setattr(scale, "device_description", lambda device: "cuda: NVIDIA H200")
    command = next(p for p in gpu_check.part_list(tmp_path, False, "cuda") if p.name == "scale").command
    again = command[command.index("--again") + 1 :]
    assert command[command.index("--merge") + 1] == str(out)  # the same GPU: its cells kept, but for
    # the training loop's, POT's and obs's again (measured before what made them faster, or before their probes
    # chose as at the paper's size); not the one-shot methods'
    assert {"fcpts", "probmask", "str", "pot-l2norm", "pot-erk", "obs"} <= set(again) and "erk" not in again
