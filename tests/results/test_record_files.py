"""The committed records lie compactly on disk and read back whole: no calibration list, per-layer row or method
report inline, every side file a record names is there and matches its hash, no side file is left that no record
names, and a typical record is a few KB."""

from __future__ import annotations

import hashlib
import json
import statistics

from tasks.grid.paths import REPO_ROOT, RESULTS_DIR
from tasks.grid.record_format import DETAIL_KEYS, LIST_KEYS, record_text, side_files
from tasks.grid.records import read_record

ROOTS = [RESULTS_DIR / "runs", RESULTS_DIR / "regression"]
TYPICAL_RECORD_BYTES = 8 * 1024  # the median record on disk, its side files aside


def committed_records() -> list:
    paths = []
    for root in ROOTS:
        for path in sorted(root.rglob("*.json")):
            if any(part.startswith(".") for part in path.relative_to(root).parts):
                continue  # a runs folder's own checkpoints and caches (not committed)
            raw = json.loads(path.read_text())
            if isinstance(raw, dict) and "metrics" in raw:
                paths.append(path)
    return paths


def test_committed_records_keep_their_lists_and_detail_in_side_files():
    named, checked = set(), 0
    for path in committed_records():
        raw = json.loads(path.read_text())
        assert not set(LIST_KEYS) & set(raw["calibration"]), f"{path}: calibration lists inline (rewrite it compactly)"
        assert not set(DETAIL_KEYS) & set(raw), f"{path}: per-layer rows inline (rewrite it compactly)"
        named.update(side_files(path))
        whole = read_record(path)  # every side file there and matching its hash, or an error naming it
        assert whole["per_layer"] and "history_every_10" in whole["method_report"], path
        if "indices" in whole["calibration"]:
            digest = hashlib.sha256(",".join(map(str, whole["calibration"]["indices"])).encode()).hexdigest()[:16]
            assert digest == whole["calibration"]["indices_sha256"], path
        checked += 1
    assert checked >= 175
    sides = {p for root in ROOTS for pattern in ("calibration-*.lists", "*.detail") for p in root.rglob(pattern)}
    assert sides == named, f"side files no record names: {sorted(map(str, sides - named))}"


def test_a_typical_committed_record_is_at_most_8_kb():
    sizes = [path.stat().st_size for path in committed_records()]
    assert statistics.median(sizes) <= TYPICAL_RECORD_BYTES, f"median record {statistics.median(sizes):.0f} bytes"


def former_text(path) -> str:
    """The record as it lay before detail files (its per-layer rows and report inline, calibration lists aside)."""
    raw = json.loads(path.read_text())
    detail = json.loads((path.parent / raw["detail"]).read_text())
    return record_text(
        {k: v for key, value in raw.items() for k, v in (detail if key == "detail" else {key: value}).items()}
    )


def test_the_notebook_states_the_committed_record_sizes():
    """docs/notebook/results.md: the record count, the median and largest record now and in the former layout, and
    the bytes of records and detail files together against the former records'."""
    paths = committed_records()
    now = [p.stat().st_size for p in paths]
    before = [len(former_text(p).encode()) for p in paths]
    detail = sum((p.parent / json.loads(p.read_text())["detail"]).stat().st_size for p in paths)
    kb = lambda n: f"{n / 1024:.1f} KB"  # noqa: E731
    total, former = (sum(now) + detail) / 1e6, sum(before) / 1e6
    expected = (
        f"Over the {len(paths)} committed records of `results/runs/` and `results/regression/`, the median record is "
        f"{kb(statistics.median(now))} and the largest {kb(max(now))} (KB: 1,024 bytes), against "
        f"{kb(statistics.median(before))} and {kb(max(before))} with the per-layer rows and history inline as before; "
        f"records and detail files together take {total:.2f} MB, against {former:.2f} MB."
    )
    text = " ".join((REPO_ROOT / "docs" / "notebook" / "results.md").read_text().split())
    assert expected in text, f"update the sentence to: {expected}"
