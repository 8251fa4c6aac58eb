"""`make check-regression` in miniature: re-run the fixed quick subset and compare to the committed
reference records (real CIFAR-10 images, the real ResNet-20 checkpoint)."""

import json

from tasks.grid.records import read_record
from tasks.regression import REFERENCE_DIR, compare, run_subset, subset_paths


def test_quick_subset_matches_committed_references(tmp_path):
    assert all(read_record(p) is not None for p in subset_paths(REFERENCE_DIR)), "reference records missing"
    run_subset(tmp_path)
    assert compare(tmp_path) == []


def test_compare_flags_a_drop_and_a_missing_record(tmp_path):
    run_dir = tmp_path / "new"
    paths = subset_paths(run_dir)
    for ref, new in zip(subset_paths(REFERENCE_DIR), paths):
        new.parent.mkdir(parents=True, exist_ok=True)
        new.write_text(ref.read_text())
    assert compare(run_dir) == []
    worse = json.loads(paths[0].read_text())
    worse["metrics"]["top1"] -= 2.0
    paths[0].write_text(json.dumps(worse))
    paths[1].unlink()
    problems = compare(run_dir)
    assert len(problems) == 2
    assert "top1" in problems[0] and "-2.00" in problems[0]
    assert "wrote no record" in problems[1]
