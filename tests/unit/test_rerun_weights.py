"""A record made in another checkout names its dense weights by that checkout's absolute path; a re-run finds the
same file here (results/weights/ or the data root's weights/) by its hash, and never a different file."""

from __future__ import annotations

from fcpts.core.io import file_sha256
from tasks.grid import rerun
from tasks.grid.rerun import local_weights


def _record(path: str, sha256: str) -> dict:
    return {"task": "cifar", "weights": {"path": path, "sha256": sha256, "epochs": 40}}


def _folders(tmp_path, monkeypatch):
    repo, data = tmp_path / "repo" / "results" / "weights", tmp_path / "data" / "weights"
    for folder in (repo / "cifar100", data / "cifar10"):
        folder.mkdir(parents=True)
    monkeypatch.setattr(rerun, "REPO_ROOT", tmp_path / "repo")
    monkeypatch.setenv("FCPTS_DATA_ROOT", str(tmp_path / "data"))
    return repo, data


def test_a_path_of_another_checkout_is_found_here_by_its_hash(tmp_path, monkeypatch):
    repo, data = _folders(tmp_path, monkeypatch)
    mine, shared = repo / "cifar100" / "resnet32.th", data / "cifar10" / "resnet20.th"
    mine.write_bytes(b"weights")
    shared.write_bytes(b"shared weights")
    moved = local_weights(_record("/elsewhere/wt-run/results/weights/cifar100/resnet32.th", file_sha256(mine)))
    assert moved["weights"] == {"path": str(mine), "sha256": file_sha256(mine), "epochs": 40}
    moved = local_weights(_record("/other/shared/data/weights/cifar10/resnet20.th", file_sha256(shared)))
    assert moved["weights"]["path"] == str(shared)


def test_a_file_with_another_hash_is_not_taken_and_an_existing_path_is_kept(tmp_path, monkeypatch):
    repo, _ = _folders(tmp_path, monkeypatch)
    (repo / "cifar100" / "resnet32.th").write_bytes(b"retrained weights")
    record = _record("/elsewhere/wt-run/results/weights/cifar100/resnet32.th", "0" * 64)
    assert local_weights(record) is record
    here = tmp_path / "here.th"
    here.write_bytes(b"x")
    record = _record(str(here), "0" * 64)
    assert local_weights(record) is record
