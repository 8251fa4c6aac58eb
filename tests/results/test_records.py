"""Regression checks on the committed run records (no runs; reads results/ only).

Fails when a record that was run before is missing, when its headline number or any other number it stores
(every metric, the achieved sparsity) is not the one registered for it in results/runs/MANIFEST.txt, when FCPTS
falls below POT in a cell at 80% or 90%, when the paper's headline cell (CIFAR-10 ResNet-56, 90%) drops more than
3 points from dense, or when a full-protocol record misses its target sparsity (recomputed from the achieved and
target sparsity, never read from the stored flag).
"""

import json
import math
from collections import defaultdict
from collections.abc import Mapping

import pytest

from tasks.grid.paths import RESULTS_DIR, RUNS_DIR
from tasks.grid.records import (
    MANIFEST,
    all_records,
    headline,
    read_manifest_entries,
    read_record,
    stored_numbers,
)

FULL_PROFILES = ("paper", "paper-cpu")
RECORDS = all_records(RUNS_DIR)
# How far a committed headline may be from its registered number (records print two decimals); the other
# stored numbers are registered to six.
COMMITTED_TOLERANCE = 0.005
NUMBER_TOLERANCE = 1.5e-6


def moved_records(records: list[dict], registered: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Records whose headline number or any other stored number is not the one registered (read_manifest_entries)."""
    problems = []
    for r in records:
        numbers = registered.get(r["_path"], {})
        registered_headline = numbers.get("value")
        stored = stored_numbers(r)
        bad = [key for key, value in stored.items() if not math.isfinite(value)]
        problems += [f"{r['_path']}: {key} is not a finite number (NaN or Inf)" for key in bad]
        name, value = headline(r)
        # `not <=`, never `>`: a NaN on either side is a move, not a match
        if registered_headline is not None and not abs(value - registered_headline) <= COMMITTED_TOLERANCE:
            problems.append(f"{r['_path']}: {name} {value:.2f}, registered {registered_headline:.2f}")
        for key, registered_value in numbers.items():
            if key == "value":
                continue
            if key not in stored:
                problems.append(f"{r['_path']}: {key} registered {registered_value:.6g}, absent from the record")
            elif not abs(stored[key] - registered_value) <= NUMBER_TOLERANCE:
                problems.append(f"{r['_path']}: {key} {stored[key]:.6g}, registered {registered_value:.6g}")
    return problems


def reaches_target(record: dict) -> bool:
    """Whether the achieved sparsity is the target's to one weight, from the numbers (not `hit_target`)."""
    total = sum(layer["numel"] for layer in record["per_layer"])
    return abs(record["achieved_sparsity"] - record["target_sparsity"]) * total <= 1.0


def test_every_record_run_before_is_present():
    expected = list(read_manifest_entries(MANIFEST))
    assert len(expected) >= 11, f"{MANIFEST} lost entries"
    missing = [p for p in expected if read_record(RUNS_DIR / p) is None]
    assert not missing, f"records missing or unreadable (restore them or remove them from {MANIFEST}): {missing}"


def test_every_present_record_is_in_the_manifest():
    listed = set(read_manifest_entries(MANIFEST))
    unlisted = [r["_path"] for r in RECORDS if r["_path"] not in listed]
    assert not unlisted, f"run `python -m tasks.reporting manifest` to register: {unlisted}"


def test_every_committed_number_is_the_registered_one():
    """Each record's every stored metric (top-1, top-5, mAP, per-class AP, image count) and achieved sparsity."""
    registered = read_manifest_entries(MANIFEST)
    assert all("value" in v for v in registered.values()), "entries without a number"
    unregistered = [p for p, numbers in registered.items() if "achieved_sparsity" not in numbers]
    assert not unregistered, f"run `python -m tasks.reporting manifest` to register every number of: {unregistered}"
    problems = moved_records(RECORDS, registered)
    assert not problems, (
        f"committed numbers moved by more than {COMMITTED_TOLERANCE} (re-run? then register with "
        f"`python -m tasks.reporting manifest --refresh PATH`): {problems}"
    )


def test_moving_a_committed_number_is_caught():
    """A copy of a real record lowered by 5 points (or by 0.01, over the tolerance) fails the check."""
    registered = read_manifest_entries(MANIFEST)
    record = next(
        r
        for r in RECORDS
        if r["_path"].endswith("resnet32/fcpts-sp90-paper-cpu-seed0.json") and r["dataset"] == "cifar100"
    )
    for delta in (-5.0, 10.0, 0.01):
        moved = {**record, "metrics": {**record["metrics"], "top1": record["metrics"]["top1"] + delta}}
        assert moved_records([moved], registered), delta
    assert moved_records([record], registered) == []


def test_moving_any_other_stored_number_is_caught():
    """A copy with its top-5 moved by 2 points, or its achieved sparsity edited from 0.90 to 0.88 with the stored
    `hit_target` flag left true, fails the checks; so does a NaN top-1, top-5 or sparsity, and a detection
    record's per-class AP."""
    registered = read_manifest_entries(MANIFEST)
    record = next(r for r in RECORDS if r["_path"] == "cifar/cifar100/resnet32/fcpts-sp90-paper-cpu-seed0.json")
    assert moved_records([record], registered) == [] and reaches_target(record)
    top5 = {**record, "metrics": {**record["metrics"], "top5": record["metrics"]["top5"] + 2.0}}
    assert any("metrics.top5" in p for p in moved_records([top5], registered))
    thinner = {**record, "achieved_sparsity": 0.88, "hit_target": True}
    assert any("achieved_sparsity" in p for p in moved_records([thinner], registered))
    assert not reaches_target(thinner)
    for key, nan in [
        (f"metrics.{m}", {**record, "metrics": {**record["metrics"], m: float("nan")}}) for m in ("top1", "top5")
    ]:
        assert any(key in p and "not a finite number" in p for p in moved_records([nan], registered)), key
    nan_sparsity = {**record, "achieved_sparsity": float("nan")}
    assert any("achieved_sparsity" in p for p in moved_records([nan_sparsity], registered))
    detection = next(r for r in RECORDS if "ap50_per_class" in r["metrics"])
    per_class = dict(detection["metrics"]["ap50_per_class"])
    first = next(iter(per_class))
    per_class[first] += 1.0
    edited = {**detection, "metrics": {**detection["metrics"], "ap50_per_class": per_class}}
    assert any(f"ap50_per_class.{first}" in p for p in moved_records([edited], registered))


def test_every_stored_hit_target_flag_is_what_its_numbers_say():
    wrong = [r["_path"] for r in RECORDS if r["hit_target"] != reaches_target(r)]
    assert not wrong, f"hit_target disagrees with achieved vs target sparsity: {wrong}"


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
    assert record["hit_target"] == reaches_target(record), "the stored hit_target flag disagrees with the numbers"
    if record["method"] != "str":  # STR has no exact step; its report says what it reached
        assert reaches_target(record), f"achieved {record['achieved_sparsity']} for target {record['target_sparsity']}"
    for key in ("command", "git_commit", "seed", "calibration", "device", "wall_s", "weights", "data"):
        assert record.get(key) not in (None, ""), f"missing provenance field {key!r}"
    assert record["calibration"]["indices_sha256"]


# Records whose commit ends in '+dirty', each with why it stays. A new one fails `test_dirty_records_are_listed`:
# make it again from a clean checkout instead of listing it.
RESULTS_COUNTED = (
    "made before commit 755ac97, when '+dirty' also counted what the checkout's earlier commands had written under "
    "results/; whether its code differed from the commit is not recorded; not re-made (CPU hours)"
)
DEVICE = (
    "made by the GPU check of 2026-11-27 on a device whose git folder was older than the working tree sent to it; its "
    "PROVENANCE.md names the commit that ran"
)
DIRTY_RECORDS = {
    **dict.fromkeys(
        (
            "benchmarks/gpu_check_h200_2026-11-27/records/cifar/cifar10/resnet32/fcpts-sp80-paper-seed0.json",
            "benchmarks/gpu_check_h200_2026-11-27/records/cifar/cifar10/resnet32/pot-l2norm-sp80-paper-seed0.json",
            "benchmarks/gpu_check_h200_2026-11-27/records/cifar/cifar10/resnet56/fcpts-sp90-fast-ampbf16-seed0.json",
            "benchmarks/gpu_check_h200_2026-11-27/records/cifar/cifar10/resnet56/fcpts-sp90-fast-seed0.json",
        ),
        DEVICE,
    ),
    **dict.fromkeys(
        (
            "investigations/obs-design/resnet32--obs-sp90-paper-cpu-block_size32-seed0.json",
            "investigations/obs-design/resnet32--obs-sp90-paper-cpu-bn_recalibrationFalse-seed0.json",
            "investigations/obs-design/resnet32--obs-sp90-paper-cpu-dense_targetsTrue-block_size1024-seed0.json",
            "investigations/obs-design/resnet32--sparsegpt-targets--obs-sp90-paper-cpu-seed0.json",
            "investigations/pot-vs-msbench/pot-runs-batches--pot-l2norm-sp80-paper-cpu-pot-samplingbatches-seed0.json",
            "investigations/pot-vs-msbench/pot-runs-diag--pot-l2norm-sp80-paper-cpu-seed0.json",
            "regression/spread/intel-xeon/voc/voc-cifar10-test100/mb2-ssd-lite-160/fcpts-sp50-regression-seed0.json",
            "regression/spread/intel-xeon/voc/voc-cifar10-test100/mb2-ssd-lite-160/pot-l2norm-sp20-regression-seed0.json",
            "runs/cifar/cifar10/resnet32/fcpts-plus-sp70-paper-cpu-seed0.json",
            "runs/cifar/cifar10/resnet32/fcpts-plus-sp80-paper-cpu-seed0.json",
            "runs/cifar/cifar10/resnet32/fcpts-plus-sp80-paper-cpu-seed1.json",
            "runs/cifar/cifar10/resnet32/fcpts-plus-sp80-paper-cpu-seed2.json",
            "runs/cifar/cifar10/resnet32/fcpts-plus-sp90-paper-cpu-seed0.json",
            "runs/cifar/cifar10/resnet32/fcpts-plus-sp90-paper-cpu-seed1.json",
            "runs/cifar/cifar10/resnet32/fcpts-plus-sp90-paper-cpu-seed2.json",
            "runs/cifar/cifar10/resnet56/fcpts-plus-sp70-paper-cpu-seed0.json",
            "runs/cifar/cifar10/resnet56/fcpts-plus-sp80-paper-cpu-seed2.json",
            "runs/cifar/cifar10/resnet56/fcpts-sp80-paper-cpu-seed0.json",
            "runs/cifar/cifar100/resnet32/fcpts-plus-sp70-paper-cpu-seed0.json",
            "runs/cifar/cifar100/resnet32/fcpts-plus-sp80-paper-cpu-seed0.json",
            "runs/cifar/cifar100/resnet32/fcpts-plus-sp80-paper-cpu-seed1.json",
            "runs/cifar/cifar100/resnet32/fcpts-plus-sp80-paper-cpu-seed2.json",
            "runs/cifar/cifar100/resnet32/fcpts-plus-sp90-paper-cpu-seed0.json",
            "runs/cifar/cifar100/resnet56/fcpts-plus-sp70-paper-cpu-seed0.json",
            "runs/cifar/cifar100/resnet56/fcpts-plus-sp80-paper-cpu-seed2.json",
            "runs/cifar/cifar100/resnet56/fcpts-plus-sp90-paper-cpu-seed2.json",
            "runs/imagenet/imagenet-val1300/efficientnet_lite0/fcpts-sp50-cpu-seed0.json",
            "runs/imagenet/imagenet-val1300/efficientnet_lite0/fcpts-sp60-cpu-seed0.json",
            "runs/imagenet/imagenet-val1300/efficientnet_lite0/fcpts-sp70-cpu-it100-reconstructionkl-lr0.005-seed0.json",
            "runs/imagenet/imagenet-val1300/efficientnet_lite0/fcpts-sp70-cpu-it100-seed0.json",
            "runs/imagenet/imagenet-val1300/efficientnet_lite0/fcpts-sp70-cpu-lr0.005-seed0.json",
            "runs/imagenet/imagenet-val1300/efficientnet_lite0/fcpts-sp80-cpu-seed0.json",
            "runs/imagenet/imagenet-val1300/efficientnet_lite0/fcpts-sp90-cpu-seed0.json",
            "runs/voc/voc-cifar10/mmdet-ssdlite_mobilenetv2_voc-cifar10-160/fcpts-sp50-cpu-seed0.json",
            "runs/voc/voc-cifar10/mmdet-ssdlite_mobilenetv2_voc-cifar10-160/fcpts-sp90-cpu-seed0.json",
            "runs/voc/voc-cifar10/mmdet-ssdlite_mobilenetv2_voc-cifar10-160/pot-erk-sp50-cpu-seed0.json",
            "runs/voc/voc-cifar10/mmdet-ssdlite_mobilenetv2_voc-cifar10-160/pot-erk-sp90-cpu-seed0.json",
            "runs/voc/voc-cifar10/mmdet-ssdlite_mobilenetv2_voc-cifar10-160/pot-l2norm-sp50-cpu-seed0.json",
            "runs/voc/voc-cifar10/mmdet-ssdlite_mobilenetv2_voc-cifar10-160/pot-l2norm-sp90-cpu-seed0.json",
        ),
        RESULTS_COUNTED,
    ),
}
BEFORE_CLEAN_COMMIT = "2026-11-28T07:22:47+00:00"  # commit 755ac97: '+dirty' counts code only from here on


def dirty_records() -> dict[str, dict]:
    """Every committed record under results/ whose own commit (the first word of `git_commit`) ends in '+dirty'."""
    found = {}
    for path in sorted(RESULTS_DIR.rglob("*.json")):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and "metrics" in record and "git_commit" in record:
            if record["git_commit"].split()[0].endswith("+dirty"):
                found[str(path.relative_to(RESULTS_DIR))] = record
    return found


def test_dirty_records_are_listed_with_why_they_stay():
    found = dirty_records()
    assert sorted(set(found) - set(DIRTY_RECORDS)) == [], "new '+dirty' records: make them from a clean checkout"
    assert sorted(set(DIRTY_RECORDS) - set(found)) == [], "listed in DIRTY_RECORDS but no longer '+dirty': unlist them"
    for path, why in DIRTY_RECORDS.items():
        if why is RESULTS_COUNTED:
            assert found[path]["created"] < BEFORE_CLEAN_COMMIT, path


def test_every_record_beside_the_released_code_names_its_commit_command_and_device():
    """The side-by-side records (results/released/) carry the provenance every record carries."""
    paths = sorted((RESULTS_DIR / "released").glob("*.json"))
    assert paths, "no records beside the released code"
    for path in paths:
        record = json.loads(path.read_text())
        assert record.get("git_commit") and record.get("command") and record.get("device"), path.name
        assert record["release_commit"] and record["msbench_commit"], path.name
