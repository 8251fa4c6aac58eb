"""Records lie on disk compactly (calibration lists in a shared side file, rows one per line) and read back whole;
records written before, with their lists inline, read as they are."""

from __future__ import annotations

import hashlib
import json

import pytest

from fcpts.core.io import write_json_atomic
from tasks.grid.record_format import record_text, write_record
from tasks.grid.records import environment, read_record


def record(seed: int = 0, n: int = 1024) -> dict:
    indices = list(range(seed, seed + 3 * n, 3))
    return {
        "task": "cifar",
        "method": "fcpts",
        "metrics": {"top1": 90.5, "top5": 99.6},
        "calibration": {
            "split": "train",
            "n_images": n,
            "seed": seed,
            "indices_sha256": hashlib.sha256(",".join(map(str, indices)).encode()).hexdigest()[:16],
            "indices": indices,
            "files": [f"train/n0/{i}.JPEG" for i in indices],
            "augment": "crop4+flip",
        },
        "per_layer": [{"name": f"layer{i}", "numel": 2304, "sparsity": 0.9 + i / 1e3} for i in range(20)],
        "method_report": {
            "extra": {"lr": 0.01},
            "history_every_10": [{"step": s, "loss": 1 / (s + 1)} for s in range(9)],
        },
    }


def test_a_record_is_written_compactly_and_read_back_whole(tmp_path):
    rec = record()
    path = tmp_path / "fcpts-sp90-paper-seed0.json"
    write_record(path, rec)
    text = path.read_text()
    (side,) = tmp_path.glob("calibration-*.lists")
    assert "train/n0/" not in text and '"lists": "' + side.name + '"' in text
    assert read_record(path) == rec
    assert list(read_record(path)["calibration"]) == list(rec["calibration"])  # the keys in their order
    inline = tmp_path / "inline.json"
    write_json_atomic(inline, rec)  # the format before: everything inline, one value per line
    assert len(text) < inline.stat().st_size / 10  # the lists, most of the bytes, are shared by the folder
    assert len(text.splitlines()) < 60  # a row per line: 20 layers, 9 history rows (inline: over 200 lines)
    # a second record of the same images shares the side file; other images get their own
    write_record(tmp_path / "pot-sp90-paper-seed0.json", {**rec, "method": "pot-l2norm"})
    write_record(tmp_path / "fcpts-sp90-paper-seed1.json", record(seed=1))
    assert len(list(tmp_path.glob("calibration-*.lists"))) == 2
    assert not [p for p in tmp_path.glob("*.json") if "calibration" in p.name]  # record globs never meet them


def test_records_written_before_read_as_they_are(tmp_path):
    rec = record()
    path = tmp_path / "old.json"
    write_json_atomic(path, rec)
    assert read_record(path) == rec


def test_a_missing_or_edited_side_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "r.json"
    write_record(path, record())
    (side,) = tmp_path.glob("calibration-*.lists")
    lists = json.loads(side.read_text())
    lists["indices"][0] = 1
    side.write_text(json.dumps(lists))
    with pytest.raises(ValueError, match=side.name):
        read_record(path)
    side.unlink()
    with pytest.raises(FileNotFoundError, match=side.name):
        read_record(path)


def test_record_text_is_the_same_json():
    rec = record()
    assert json.loads(record_text(rec)) == rec


def test_provenance_names_the_model_libraries_installed():
    timm = pytest.importorskip("timm")
    assert environment()["timm"] == timm.__version__


def test_a_grid_writes_its_records_compactly_and_skips_them_when_done(tmp_path):
    from tasks.grid.runner import run_grid
    from tests.unit.test_reliability import grid

    (done,) = run_grid(grid(tmp_path), ["uniform"], [0.5], log=lambda _: None)
    path = tmp_path / "runs/t/d/m/uniform-sp50-tiny-seed0.json"
    assert '"indices"' not in path.read_text() and list(path.parent.glob("calibration-*.lists"))
    assert read_record(path)["calibration"] == done["calibration"] == {"n_images": 8, "indices": list(range(8))}
    logged = []
    (again,) = run_grid(grid(tmp_path), ["uniform"], [0.5], log=logged.append)
    assert again == read_record(path) and logged[0].startswith("[skip]")
