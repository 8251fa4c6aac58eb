"""Re-running a record with the code that made it: the record's command narrowed to its cell, masks compared by
where their zeros are, the verdict, and a finished old-code run reused only from a checkout at the record's commit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from benchmarks.code import rerun_at_commit
from benchmarks.code.rerun_at_commit import (
    cell_command,
    pattern_sha256,
    same_as_record,
    share_differing,
    verdict,
    zero_patterns,
)

RECORD = {
    "_path": "results/runs/imagenet/val/lite0/fcpts-sp90-cpu-seed0.json",
    "command": "python -m tasks.imagenet --models lite0 r18 --profile cpu --no-progress --methods lamp fcpts "
    "--sparsity 0.7 0.9 --force --results-dir elsewhere",
    "model": "lite0",
    "method": "fcpts",
    "target_sparsity": 0.9,
}


def test_the_command_is_narrowed_to_the_records_cell(tmp_path):
    command = cell_command(RECORD, tmp_path, "/data/imagenet")
    assert command == [
        sys.executable,
        *("-m", "tasks.imagenet", "--models", "lite0", "--profile", "cpu", "--no-progress"),
        *("--methods", "fcpts", "--sparsity", "0.9"),
        *("--results-dir", str(tmp_path), "--data-root", "/data/imagenet"),
    ], "one cell, no --force, its records in the work folder"
    with pytest.raises(ValueError, match="does not start with `python -m`"):
        cell_command({**RECORD, "command": "make run"}, tmp_path, None)


def _saved(path, weight: torch.Tensor):
    torch.save({"conv.weight": weight, "conv.bias": torch.zeros(2), "bn.weight": torch.zeros(2)}, path)
    return path


def test_masks_compare_by_their_zeros_alone(tmp_path):
    weight = torch.arange(1.0, 17.0).reshape(2, 2, 2, 2)
    weight[0, 0] = 0
    a = zero_patterns(_saved(tmp_path / "a.pt", weight))
    assert sorted(a) == ["conv.weight"], "biases and BatchNorm weights (one dimension) are not masks"
    b = zero_patterns(_saved(tmp_path / "b.pt", weight * 3))  # other values, the same zeros
    assert pattern_sha256(a) == pattern_sha256(b) and share_differing(a, b) == 0.0
    moved = weight.clone()
    moved[1, 1, 1, 1] = 0
    c = zero_patterns(_saved(tmp_path / "c.pt", moved))
    assert pattern_sha256(c) != pattern_sha256(a) and share_differing(a, c) == 1 / 16
    other = zero_patterns(_saved(tmp_path / "d.pt", torch.ones(3, 2, 2, 2)))
    assert share_differing(a, other) == 1.0, "another shape is another model"


def test_the_verdict_names_what_moved_the_model():
    assert verdict(False, True).startswith("the processor")
    assert verdict(True, False).startswith("the code")
    assert verdict(False, False).startswith("both")
    assert verdict(True, True).startswith("neither")
    # from a dirty tree the commit alone is not the record's code: another model here does not name the processor
    assert verdict(False, True, record_tree_dirty=True).startswith("the processor or the record's uncommitted changes")
    assert verdict(False, False, record_tree_dirty=True).startswith("both the code since and the processor or")
    assert verdict(True, False, record_tree_dirty=True) == verdict(True, False)


def test_the_old_code_s_model_is_the_record_s_by_mask_hash_and_numbers_where_the_record_has_a_hash():
    """Two saves of one model can differ in bytes: where the record has a mask hash, that and its numbers decide."""
    numbers = {"achieved_sparsity": 0.7, "metrics": {"top1": 63.69}}
    record = {**numbers, "mask_sha256": "m", "sparse_model": {"sha256": "file"}}
    assert same_as_record(record, {**numbers, "mask_sha256": "m"}, "other-file") == (True, "mask hash and numbers")
    assert not same_as_record(record, {**numbers, "mask_sha256": "other"}, "file")[0]
    assert not same_as_record(record, {**numbers, "mask_sha256": "m", "metrics": {"top1": 63.7}}, "file")[0]
    older = {**numbers, "sparse_model": {"sha256": "file"}}  # before the mask hash: the model file decides
    assert same_as_record(older, numbers, "file") == (True, "model file hash")
    assert not same_as_record(older, numbers, "other-file")[0]


def _commit(repo) -> str:
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "f").write_text("x")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def test_a_finished_old_code_run_is_reused_only_at_the_records_commit(tmp_path, monkeypatch):
    commit = _commit(tmp_path / "work" / "checkout")
    record = {**RECORD, "git_commit": commit, "sparse_model": {"path": "results/runs/models/imagenet/m.pt"}}
    finished = tmp_path / "work" / "runs" / "imagenet" / "val" / "lite0" / "fcpts-sp90-cpu-seed0.json"
    finished.parent.mkdir(parents=True)
    finished.write_text(json.dumps({"metrics": {"top1": 0.5}}))
    monkeypatch.setattr(rerun_at_commit.subprocess, "run", _no_cell_run(subprocess.run))
    old, model = rerun_at_commit.run_old_code(record, tmp_path / "work", None)
    assert old == {"metrics": {"top1": 0.5}} and model == tmp_path / "work" / "runs" / "models" / "imagenet" / "m.pt"
    dirty = {**record, "git_commit": commit + "+dirty"}  # its commit's checkout, without the uncommitted changes
    assert rerun_at_commit.run_old_code(dirty, tmp_path / "work", None) == (old, model)
    with pytest.raises(SystemExit, match="not the record's"):
        rerun_at_commit.run_old_code({**record, "git_commit": "0" * 40}, tmp_path / "work", None)


def _no_cell_run(run):
    def guarded(command, *args, **kwargs):
        assert command[0] == "git", f"a finished run was run again: {command}"
        return run(command, *args, **kwargs)

    return guarded


def test_a_record_without_a_saved_models_hash_is_refused_before_work(tmp_path, monkeypatch, capsys):
    record = tmp_path / "results" / "runs" / "r.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({**RECORD, "sparse_model": {"path": "x.pt"}}))
    today = tmp_path / "today.pt"
    today.write_bytes(b"")
    monkeypatch.setattr(rerun_at_commit, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(rerun_at_commit, "run_old_code", lambda *a: pytest.fail("work started"))
    with pytest.raises(SystemExit):
        rerun_at_commit.main(
            ["--record", "results/runs/r.json", "--today", str(today), "--work-dir", str(tmp_path / "w")]
        )
    assert "names no saved model's hash" in capsys.readouterr().err


def test_a_record_outside_the_grid_s_records_is_refused_by_name(tmp_path, monkeypatch, capsys):
    record = tmp_path / "results" / "regression" / "r.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({**RECORD, "sparse_model": {"path": "x.pt", "sha256": "0" * 64}}))
    today = tmp_path / "today.pt"
    today.write_bytes(b"")
    monkeypatch.setattr(rerun_at_commit, "REPO_ROOT", tmp_path)
    with pytest.raises(SystemExit):
        rerun_at_commit.main(["--record", "results/regression/r.json", "--today", str(today), "--work-dir", "w"])
    assert "under results/runs/" in capsys.readouterr().err
