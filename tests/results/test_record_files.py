"""The committed records lie compactly on disk and read back whole: no calibration list inline, every side file a
record names is there and matches the recorded hash, and no side file is left that no record names."""

from __future__ import annotations

import hashlib
import json

from tasks.grid.paths import RESULTS_DIR
from tasks.grid.record_format import LIST_KEYS
from tasks.grid.records import read_record

ROOTS = [RESULTS_DIR / "runs", RESULTS_DIR / "regression"]


def test_committed_records_keep_their_calibration_lists_in_side_files():
    named, checked = set(), 0
    for root in ROOTS:
        for path in sorted(root.rglob("*.json")):
            if any(part.startswith(".") for part in path.relative_to(root).parts):
                continue  # a runs folder's own checkpoints and caches (not committed)
            raw = json.loads(path.read_text())
            if not isinstance(raw, dict) or "metrics" not in raw:
                continue
            calibration = raw["calibration"]
            assert not set(LIST_KEYS) & set(calibration), f"{path}: calibration lists inline (rewrite it compactly)"
            named.add(path.parent / calibration["lists"])
            whole = read_record(path)["calibration"]
            if "indices" in whole:
                digest = hashlib.sha256(",".join(map(str, whole["indices"])).encode()).hexdigest()[:16]
                assert digest == whole["indices_sha256"], path
            checked += 1
    assert checked >= 175
    sides = {p for root in ROOTS for p in root.rglob("calibration-*.lists")}
    assert sides == named, f"side files no record names: {sorted(map(str, sides - named))}"
