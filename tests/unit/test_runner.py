"""The grid runner: the dense evaluation is done once per grid identity, not per invocation; its console tables."""

import json
import re

import pytest
import torch
from torch import nn

from tasks.grid.profiles import Profile
from tasks.grid.rerun import get_task
from tasks.grid.runner import Grid, format_table, run_grid
from tasks.voc.grid import VOC_COLUMNS


def _grid(tmp_path, calls: list, weights: str) -> Grid:
    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))

    def evaluate(model):
        calls.append(1)
        return {"top1": 100.0 * float((model[0].weight == 0).float().mean()), "top5": 0.0}

    def calibration(n, augment):
        return torch.randn(n, 3, 8, 8), {"split": "train", "n_images": n, "indices": list(range(n))}

    return Grid(
        task="t",
        dataset="d",
        model="m",
        build_model=build,
        make_calibration=calibration,
        evaluate=evaluate,
        profile=Profile("tiny", n_calibration=4, iterations=1),
        seed=0,
        provenance={"weights": {"sha256": weights}},
        runs_dir=tmp_path / "runs",
        checkpoint_dir=tmp_path / "ck",
        progress=False,
    )


def test_dense_metrics_are_evaluated_once_per_identity(tmp_path):
    calls, lines = [], []
    run_grid(_grid(tmp_path, calls, "a"), ["uniform"], [0.5], log=lines.append)
    assert len(calls) == 2  # dense + the sparse model
    run_grid(_grid(tmp_path, calls, "a"), ["uniform"], [0.6], log=lines.append)
    assert len(calls) == 3  # the dense number came from the first invocation
    assert any("kept in dense-" in line for line in lines)
    run_grid(_grid(tmp_path, calls, "b"), ["uniform"], [0.7], log=lines.append)
    assert len(calls) == 5  # other weights: evaluated again


RECORD = {
    "model": "mb2-ssd-lite-160",
    "method": "fcpts",
    "target_sparsity": 0.9,
    "achieved_sparsity": 0.9,
    "metrics": {"top1": 70.125, "top5": 90.5, "map50": 30.03},
    "dense_metrics": {"top1": 72.5, "top5": 91.0, "map50": 38.0},
    "wall_s": 394.4,
}


def test_the_classification_table_lines_up_top1_top5_and_the_drop_in_top1():
    assert get_task("cifar").results_table([RECORD]).splitlines() == [
        "method             target  achieved    top1    top5   dense   drop  time s",
        "-" * 74,
        "fcpts                0.90  0.900000   70.12   90.50   72.50   2.38     394",
    ]


def test_the_detection_table_adds_the_model_and_shows_map():
    assert format_table([RECORD], VOC_COLUMNS).splitlines() == [
        "model              method         target  achieved     mAP   dense   drop  time s",
        "-" * 81,
        "mb2-ssd-lite-160   fcpts            0.90  0.900000   30.03   38.00   7.97     394",
    ]


def test_the_manifest_registers_every_stored_number_and_keeps_registered_ones(tmp_path):
    from tasks.grid.records import read_manifest_entries, update_manifest
    from tests.results.test_records import moved_records

    runs = tmp_path / "runs"
    run_grid(_grid(tmp_path, [], "a"), ["uniform"], [0.5], log=lambda _: None)
    manifest = tmp_path / "MANIFEST.txt"
    (rel,) = update_manifest(runs, manifest)
    numbers = read_manifest_entries(manifest)[rel]
    assert {"value", "achieved_sparsity", "metrics.top1", "metrics.top5"} <= set(numbers)
    record_file = runs / rel
    record = json.loads(record_file.read_text())
    record["metrics"]["top5"] = 2.0  # an edit, then a re-registration that is not a deliberate refresh
    record_file.write_text(json.dumps(record))
    update_manifest(runs, manifest)
    assert read_manifest_entries(manifest)[rel]["metrics.top5"] == numbers["metrics.top5"]
    assert moved_records([{**record, "_path": rel}], read_manifest_entries(manifest))
    with pytest.raises(ValueError, match="no record there"):  # a path that names no record refreshes nothing
        update_manifest(runs, manifest, refresh=(f"results/runs/{rel}",))
    assert read_manifest_entries(manifest)[rel]["metrics.top5"] == numbers["metrics.top5"]
    update_manifest(runs, manifest, refresh=(rel,))
    assert read_manifest_entries(manifest)[rel]["metrics.top5"] == 2.0


@pytest.mark.parametrize("key", ["top1", "top5", "achieved_sparsity"])
def test_a_nan_number_is_never_registered_nor_passes_as_the_registered_one(tmp_path, key):
    from tasks.grid.records import read_manifest_entries, update_manifest
    from tests.results.test_records import moved_records

    runs = tmp_path / "runs"
    run_grid(_grid(tmp_path, [], "a"), ["uniform"], [0.5], log=lambda _: None)
    manifest = tmp_path / "MANIFEST.txt"
    (rel,) = update_manifest(runs, manifest)
    record_file = runs / rel
    record = json.loads(record_file.read_text())
    (record if key == "achieved_sparsity" else record["metrics"])[key] = float("nan")
    record_file.write_text(json.dumps(record))
    problems = moved_records([{**record, "_path": rel}], read_manifest_entries(manifest))
    assert any(rel in p and key in p and "not a finite number" in p for p in problems), problems
    with pytest.raises(ValueError, match=re.escape(rel) + f".*{key}.*not a finite number"):
        update_manifest(runs, manifest, refresh=(rel,))
