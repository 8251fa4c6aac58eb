"""Records lie on disk compactly (calibration lists in a shared side file, per-layer rows and the method's report in
the record's own detail file, rows one per line) and read back whole; records written before, with everything
inline, read as they are."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from fcpts.core.io import write_json_atomic
from tasks.grid.record_format import RecordError, record_text, side_files, write_record
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


def test_a_record_round_trips_through_its_detail_file(tmp_path):
    rec = {**record(), "mask_sha256": "ab" * 8, "sparse_model": {"path": "m.pt"}}  # keys after the detail too
    path = tmp_path / "fcpts-sp90.4-paper-seed0.json"  # a dot in the record's name
    write_record(path, rec)
    text = path.read_text()
    (detail,) = tmp_path.glob("*.detail")
    assert detail.name.startswith("fcpts-sp90.4-paper-seed0.") and f'"detail": "{detail.name}"' in text
    assert '"per_layer"' not in text and '"history_every_10"' not in text and '"layer19"' in detail.read_text()
    assert len(text) < 1024  # what was run and what it scored; the rows are in the detail file
    back = read_record(path)
    assert back == rec and list(back) == list(rec)  # every key and value, in their order
    assert json.dumps(back) == json.dumps(rec)
    assert set(side_files(path)) == {detail, *tmp_path.glob("calibration-*.lists")}
    swapped = {k: rec[k] for k in ("task", "method_report", "metrics", "per_layer", "calibration")}
    write_record(tmp_path / "swapped.json", swapped)  # the detail's keys apart and in the other order
    back = read_record(tmp_path / "swapped.json")
    assert back == swapped and list(back) == ["task", "method_report", "per_layer", "metrics", "calibration"]


def test_a_rewritten_record_replaces_its_detail_file(tmp_path):
    path = tmp_path / "fcpts-sp90-paper-seed0.json"
    write_record(path, record())
    (first,) = tmp_path.glob("*.detail")
    write_record(path, record())  # the same record: the same file, kept
    assert list(tmp_path.glob("*.detail")) == [first]
    rerun = {**record(), "per_layer": [{"name": "layer0", "numel": 2304, "sparsity": 0.5}]}
    write_record(path, rerun)  # a re-run: its own detail file, the old one gone
    (second,) = tmp_path.glob("*.detail")
    assert second != first and read_record(path) == rerun


def test_an_edited_or_missing_detail_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "r.json"
    write_record(path, record())
    (detail,) = tmp_path.glob("*.detail")
    detail.write_text(detail.read_text().replace("0.901", "0.801"))
    with pytest.raises(ValueError, match=detail.name):
        read_record(path)
    detail.unlink()
    with pytest.raises(RecordError, match=detail.name):
        read_record(path)


@pytest.mark.parametrize("kind", ["detail", "lists"])
@pytest.mark.parametrize("damage", ["", '{"per_layer": [', "\xff"])
def test_a_truncated_or_empty_side_file_is_an_error_naming_it_and_the_fix(tmp_path, kind, damage):
    path = tmp_path / "r.json"
    write_record(path, record())
    (side,) = tmp_path.glob(f"*.{kind}")
    side.write_bytes(damage.encode("latin-1"))
    with pytest.raises(RecordError, match=rf"{side.name}.*--force.*restore") as error:
        read_record(path)
    assert isinstance(error.value, ValueError)  # a task's command prints it as its one-line error


def test_a_command_reading_a_record_whose_side_file_is_gone_fails_in_one_line(tmp_path, capsys):
    from tasks.grid.cli import run_main

    path = tmp_path / "r.json"
    write_record(path, record())
    next(tmp_path.glob("*.detail")).unlink()
    assert run_main(lambda: bool(read_record(path))) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and ".detail is missing" in err and "--force" in err


@pytest.mark.parametrize("kind", ["detail", "lists"])
def test_rewriting_a_record_replaces_its_damaged_side_file_of_the_same_name(tmp_path, kind):
    """A --force re-run whose detail (or lists) hash as before must not trust the damaged file for its name."""
    path = tmp_path / "r.json"
    write_record(path, record())
    (side,) = tmp_path.glob(f"*.{kind}")
    side.write_text(side.read_text()[:40])
    write_record(path, record())
    assert read_record(path) == record()


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
    with pytest.raises(RecordError, match=side.name):
        read_record(path)


def test_record_text_is_the_same_json():
    rec = record()
    assert json.loads(record_text(rec)) == rec


def test_provenance_names_the_model_libraries_installed():
    timm = pytest.importorskip("timm")
    assert environment()["timm"] == timm.__version__


def test_provenance_tells_processor_generations_apart():
    """A masked model name ('AMD EPYC') hides the generation, whose float kernels can move a training method's mask."""
    from tasks.grid.records import cpu_identity

    zen3 = "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nstepping\t: 1\n\nprocessor\t: 1\n"
    zen2 = zen3.replace("25", "23")
    capability = torch.backends.cpu.get_cpu_capability()
    assert cpu_identity(zen3) == f"{capability}, family 25 model 1 stepping 1"
    assert cpu_identity(zen2) == f"{capability}, family 23 model 1 stepping 1"
    assert cpu_identity("") == capability
    assert environment()["cpu"] == cpu_identity()


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
