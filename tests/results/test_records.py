"""Regression checks on the committed run records (no runs; reads results/ only).

Fails when a record that was run before is missing, when its headline number is not the one registered for
it in results/runs/MANIFEST.txt, when FCPTS falls below POT in a cell at 80% or
90%, when the paper's headline cell (CIFAR-10 ResNet-56, 90%) drops more than 3 points from dense, or
when a full-protocol record misses its target sparsity.
"""

from collections import defaultdict

import pytest

from tasks.grid.paths import RUNS_DIR
from tasks.grid.records import (
    COMMITTED_TOLERANCE,
    MANIFEST,
    all_records,
    moved_records,
    read_manifest,
    read_manifest_values,
    read_record,
)

FULL_PROFILES = ("paper", "paper-cpu")
RECORDS = all_records(RUNS_DIR)


def test_every_record_run_before_is_present():
    expected = read_manifest(MANIFEST)
    assert len(expected) >= 11, f"{MANIFEST} lost entries"
    missing = [p for p in expected if read_record(RUNS_DIR / p) is None]
    assert not missing, f"records missing or unreadable (restore them or remove them from {MANIFEST}): {missing}"


def test_every_present_record_is_in_the_manifest():
    listed = set(read_manifest(MANIFEST))
    unlisted = [r["_path"] for r in RECORDS if r["_path"] not in listed]
    assert not unlisted, f"run `python -m tasks.reporting manifest` to register: {unlisted}"


def test_every_committed_number_is_the_registered_one():
    registered = read_manifest_values(MANIFEST)
    assert sum(v is not None for v in registered.values()) == len(registered), "entries without a number"
    problems = moved_records(RECORDS, registered)
    assert not problems, (
        f"committed numbers moved by more than {COMMITTED_TOLERANCE} (re-run? then register with "
        f"`python -m tasks.reporting manifest --refresh PATH`): {problems}"
    )


def test_moving_a_committed_number_is_caught():
    """A copy of a real record lowered by 5 points (or by 0.01, over the tolerance) fails the check."""
    registered = read_manifest_values(MANIFEST)
    record = next(
        r
        for r in RECORDS
        if r["_path"].endswith("resnet32/fcpts-sp90-paper-cpu-seed0.json") and r["dataset"] == "cifar100"
    )
    for delta in (-5.0, 10.0, 0.01):
        moved = {**record, "metrics": {**record["metrics"], "top1": record["metrics"]["top1"] + delta}}
        assert moved_records([moved], registered), delta
    assert moved_records([record], registered) == []


def _cells():
    cells = defaultdict(dict)
    for r in RECORDS:
        cells[(r["task"], r["dataset"], r["model"], round(r["target_sparsity"], 4), r["profile"]["name"])][
            r["method"]
        ] = r
    return cells


def _headline(record: dict) -> float:
    """Top-1 for classification, mAP@0.5 for detection."""
    return record["metrics"]["top1" if "top1" in record["metrics"] else "map50"]


def test_fcpts_beats_pot_at_80_and_90_percent():
    compared = 0
    for (task, ds, model, sp, prof), by in _cells().items():
        if sp < 0.8 or "fcpts" not in by:
            continue
        for pot in ("pot-l2norm", "pot-erk"):
            if pot in by:
                compared += 1
                f, p = _headline(by["fcpts"]), _headline(by[pot])
                assert f >= p, f"{task}/{ds}/{model} {sp:.0%} [{prof}]: FCPTS {f:.2f} < {pot} {p:.2f}"
    assert compared >= 4, "expected committed FCPTS-vs-POT cells at 80/90% (CIFAR-10 ResNet-32 at least)"


def test_resnet56_cifar10_drop_at_90_percent_within_3_points():
    headline = [
        r
        for r in RECORDS
        if (r["dataset"], r["model"], r["method"], r["target_sparsity"]) == ("cifar10", "resnet56", "fcpts", 0.9)
        and r["profile"]["name"] in FULL_PROFILES
    ]
    assert headline, "no full-protocol record for FCPTS, CIFAR-10 ResNet-56, 90%"
    for r in headline:
        drop = r["dense_metrics"]["top1"] - r["metrics"]["top1"]
        assert drop <= 3.0, f"{r['_path']}: drop {drop:.2f} > 3 points"


@pytest.mark.parametrize(
    "record", [r for r in RECORDS if r["profile"]["name"] in FULL_PROFILES], ids=lambda r: r["_path"]
)
def test_full_protocol_records_hit_target_and_carry_provenance(record):
    if record["method"] != "str":  # STR has no exact step; its report says what it reached
        assert record["hit_target"], f"achieved {record['achieved_sparsity']} for target {record['target_sparsity']}"
    for key in ("command", "git_commit", "seed", "calibration", "device", "wall_s", "weights", "data"):
        assert record.get(key) not in (None, ""), f"missing provenance field {key!r}"
    assert record["calibration"]["indices_sha256"]
