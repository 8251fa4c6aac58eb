"""The re-run sample's choices, on fake records written to disk: which record stands for a method, which are held
back and why, the order cells run in, and the checks on its command line that come before any work."""

from __future__ import annotations

import json

import pytest

from benchmarks.code import rerun_sample
from benchmarks.code.rerun_sample import (
    Processor,
    committed_records,
    kept_rows,
    pick_record,
    still_current,
)
from fcpts.core.io import write_json_atomic


def _record(root, name: str, method: str, task: str, wall_s: float, mask: bool = True, **extra) -> None:
    record = {
        "task": task,
        "method": method,
        "wall_s": wall_s,
        "metrics": {"top1": 50.0},
        "profile": {"name": "cpu"},
        "device": "cpu: AMD EPYC, 1 threads",
        **({"mask_sha256": f"hash-{name}"} if mask else {}),
        **extra,
    }
    write_json_atomic(root / task / "data" / "model" / f"{name}.json", record)


@pytest.fixture
def records(tmp_path):
    runs, regression = tmp_path / "runs", tmp_path / "regression"
    _record(runs, "voc-cheapest", "fcpts", "voc", 1.0)
    _record(runs, "cifar-no-hash", "fcpts", "cifar", 2.0, mask=False)
    _record(runs, "imagenet-slow", "fcpts", "imagenet", 30.0)
    _record(regression, "cifar-cheap", "fcpts", "cifar", 5.0)
    _record(regression / "spread" / "xeon", "cifar-xeon", "fcpts", "cifar", 9.0, device="cpu: Intel Xeon, 1 threads")
    _record(runs, "old-only", "erk", "voc", 3.0, mask=False)
    _record(runs, "mmdet-only", "lamp", "coco", 1.0, framework="mmdet")
    return committed_records([runs, regression])


def test_the_regression_s_re_runs_on_other_processors_are_left_out(records):
    assert len(records) == 6
    assert not any("spread" in r["_path"] for r in records)


def test_a_hashed_stand_in_cell_beats_a_cheaper_detection_cell_and_a_cheaper_record_without_hash(records):
    record, why = pick_record(records, "fcpts")
    assert why is None and record["_path"].endswith("regression/cifar/data/model/cifar-cheap.json")


XEON = Processor("cpu: Intel Xeon", "AVX512, family 6 model 143 stepping 8")
ZEN3 = Processor("cpu: AMD EPYC", "AVX2, family 25 model 1 stepping 1")
ZEN4 = "AVX512, family 25 model 17 stepping 1"


def test_this_processor_holds_back_another_generation_and_prefers_a_record_naming_its_own(tmp_path):
    """Two generations hide behind 'AMD EPYC': a record naming the other one is not this processor's; one naming
    none may be (it predates the field), and comes after one naming this machine's."""
    runs = tmp_path / "runs"
    _record(runs, "zen4", "fcpts", "cifar", 1.0, environment={"cpu": ZEN4})
    _record(runs, "unnamed", "fcpts", "cifar", 2.0)
    _record(runs, "zen3", "fcpts", "cifar", 3.0, environment={"cpu": ZEN3.kernels})
    _record(runs, "zen4-only", "lamp", "cifar", 1.0, environment={"cpu": ZEN4})
    records = committed_records([runs])
    assert pick_record(records, "fcpts", this_processor=ZEN3)[0]["_path"].endswith("zen3.json")
    assert pick_record(records, "fcpts")[0]["_path"].endswith("zen4.json")  # any processor: the cheapest
    assert pick_record(records, "lamp", this_processor=ZEN3) == (
        None,
        f"1 record(s): made on another generation of it ({ZEN4}), not this machine's ({ZEN3.kernels})",
    )
    zen3 = next(r for r in records if r["_path"].endswith("zen3.json"))
    zen3["environment"].pop("cpu")  # as if it predated the field: then the cheaper record naming none is as good
    assert pick_record(records, "fcpts", this_processor=ZEN3)[0]["_path"].endswith("unnamed.json")


def test_this_processor_reads_the_regression_s_re_runs_elsewhere_and_only_records_made_on_it(tmp_path, records):
    records = committed_records([tmp_path / "runs", tmp_path / "regression"], with_spread=True)
    record, _ = pick_record(records, "fcpts", this_processor=XEON)
    assert record["_path"].endswith("spread/xeon/cifar/data/model/cifar-xeon.json")
    assert pick_record(records, "fcpts")[0]["_path"].endswith("cifar-cheap.json")
    assert pick_record(records, "erk", this_processor=XEON) == (
        None,
        "1 record(s): made on another processor (cpu: AMD EPYC), not this machine's",
    )


def test_a_method_with_only_old_records_still_gets_one(records):
    record, _ = pick_record(records, "erk")
    assert record["_path"].endswith("old-only.json") and "mask_sha256" not in record


def test_a_method_held_back_says_why_and_how_many(records, monkeypatch):
    monkeypatch.setattr(rerun_sample, "why_not_runnable", lambda r: "needs the [mmdet] extra")
    record, why = pick_record(records, "lamp")
    assert record is None and why == "1 record(s): needs the [mmdet] extra"
    assert pick_record(records, "obs") == (None, "no committed record of this method")


def test_mmdet_records_are_held_back_without_the_extra(records, monkeypatch):
    monkeypatch.setattr(rerun_sample.importlib.util, "find_spec", lambda name: None)
    record, why = pick_record(records, "lamp")
    assert record is None and "[mmdet] extra" in why


def test_cells_run_cheapest_first(records, tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(rerun_sample, "committed_records", lambda **_: records)
    monkeypatch.setattr(
        rerun_sample, "row_for", lambda m, *_, **__: ran.append(m) or {"method": m, "status": "skipped"}
    )
    monkeypatch.setattr(rerun_sample, "markdown", lambda _: "")
    rerun_sample.main(["--out", str(tmp_path / "out.json"), "--methods", "fcpts", "erk"])
    assert ran == ["erk", "fcpts"]  # the registry has fcpts first


def test_resume_keeps_only_the_rows_that_ran(tmp_path):
    out = tmp_path / "out.json"
    rows = [{"method": "lamp", "status": "ran", "record": "x"}, {"method": "str", "status": "skipped"}]
    out.write_text(json.dumps({"rows": rows}))
    assert list(kept_rows(out)) == ["lamp"]
    out.write_text("[]")
    with pytest.raises(SystemExit, match="not this benchmark's output"):
        kept_rows(out)


def test_a_kept_row_is_run_again_once_its_record_was_made_again_or_another_is_picked(tmp_path, records):
    picked, _ = pick_record(records, "fcpts")
    row = {
        "method": "fcpts",
        "record": picked["_path"],
        "old_created": picked.get("created"),
        "old_git_commit": picked.get("git_commit"),
        "old_mask_sha256": picked["mask_sha256"],
    }
    assert still_current(row, picked)
    assert not still_current(row, {**picked, "mask_sha256": "hash-remade"})  # the same file, made again since
    assert not still_current({**row, "record": "elsewhere.json"}, picked)  # another record picked now
    assert not still_current(row, None)  # no record of the method any more


def test_a_work_dir_cell_resumes_only_what_the_same_commit_began(tmp_path, records, monkeypatch):
    calls = []
    row = {"match": True, "metric": "top1", "old_value": 1.0, "new_value": 1.0, "cell_wall_s": 1.0}
    row |= {"old_mask_sha256": "a", "new_mask_sha256": "a"}

    def fake_run_cell(record, scratch, resume=False):
        calls.append((scratch, resume))
        return row

    monkeypatch.setattr(rerun_sample, "run_cell", fake_run_cell)
    monkeypatch.setattr(rerun_sample, "git_commit", lambda: "abc")
    rerun_sample.row_for("fcpts", pick_record(records, "fcpts"), 1e9, work_dir=tmp_path / "work", log=lambda s: None)
    assert calls == [(tmp_path / "work" / "fcpts", False)]  # nothing there yet: from scratch
    (tmp_path / "work" / "fcpts" / "git_commit").write_text("other\n")
    rerun_sample.row_for("fcpts", pick_record(records, "fcpts"), 1e9, work_dir=tmp_path / "work", log=lambda s: None)
    assert calls[-1] == (tmp_path / "work" / "fcpts", False)  # begun by other code: from scratch again
    rerun_sample.row_for("fcpts", pick_record(records, "fcpts"), 1e9, work_dir=tmp_path / "work", log=lambda s: None)
    assert calls[-1] == (tmp_path / "work" / "fcpts", True)  # begun by this commit: carried on


def test_the_table_names_each_row_s_re_run_processor_and_commit():
    """A `--resume` output holds rows re-run on other processors and commits than its last run's: the table says
    which ran where, not only the last run's device."""

    def ran(method: str, device: str, commit: str) -> dict:
        return {
            "method": method,
            "status": "ran",
            "record": f"{method}.json",
            "compared": "mask hash and numbers",
            "metric": "top1",
            "old_value": 1.0,
            "new_value": 1.0,
            "old_mask_sha256": "a" * 64,
            "new_mask_sha256": "a" * 64,
            "match": True,
            "cell_wall_s": 1.0,
            "cell_cpu_s": 1.0,
            "old_device": "cpu: AMD EPYC, 1 threads",
            "new_device": device,
            "new_git_commit": commit,
        }

    rows = [
        ran("lamp", "cpu: Intel(R) Xeon(R) Processor, 1 threads", "1" * 40),
        ran("obs", "cpu: AMD EPYC, 1 threads", "2" * 40 + "+dirty"),
    ]
    provenance = {"torch": "2", "git_commit": "3" * 40, "device": "cpu: AMD EPYC, 1 threads"}
    table = rerun_sample.markdown({"summary": rerun_sample.summary(rows), "provenance": provenance, "rows": rows})
    lamp, obs = (line for line in table.splitlines() if line.startswith(("| lamp", "| obs")))
    assert lamp.endswith("| cpu: Intel(R) Xeon(R) Processor, 1111111 |")
    assert obs.endswith("| cpu: AMD EPYC, 2222222+dirty |")
    assert "last written at commit 333333333333 on cpu: AMD EPYC, 1 threads" in table

    # rows that know the generations: the table names them, and a difference the record cannot place says so
    named = {**ran("fcpts", "cpu: AMD EPYC, 1 threads", "4" * 40), "old_kernels": ZEN4, "new_kernels": ZEN3.kernels}
    unnamed = {**named, "method": "fcpts-plus", "old_kernels": None, "match": False}
    table = rerun_sample.markdown({"summary": rerun_sample.summary([named, unnamed]), "provenance": provenance,
                                   "rows": [named, unnamed]})  # fmt: skip
    fcpts, plus = (line for line in table.splitlines() if line.startswith(("| fcpts |", "| fcpts-plus |")))
    assert f"| yes | 1 | cpu: AMD EPYC, 1 threads ({ZEN4}) | cpu: AMD EPYC ({ZEN3.kernels}), 4444444 |" in fcpts
    assert "| NO (the record names no generation: perhaps the processor's) | 1 |" in plus
    assert "| cpu: AMD EPYC, 1 threads (generation not recorded) |" in plus


def test_a_note_that_no_longer_holds_is_forgotten_by_name_and_an_absent_one_is_refused(tmp_path, monkeypatch):
    out = tmp_path / "out.json"
    row = {"method": "lamp", "status": "ran", "record": "x", "match": True, "cell_cpu_s": 1.0, "cell_wall_s": 1.0}
    notes = ["STR's row names its commit abc+dirty: only this output differed", "FCPTS's row: kept"]
    out.write_text(json.dumps({"rows": [row], "notes": notes}))
    with pytest.raises(SystemExit):  # before any work: nothing is run or written
        rerun_sample.main(["--out", str(out), "--resume", "--forget-note", "no such note"])
    assert json.loads(out.read_text())["notes"] == notes
    monkeypatch.setattr(rerun_sample, "committed_records", lambda **_: [])
    monkeypatch.setattr(rerun_sample, "still_current", lambda *_: True)
    monkeypatch.setattr(rerun_sample, "markdown", lambda _: "")
    rerun_sample.main(["--out", str(out), "--resume", "--methods", "lamp", "--forget-note", "STR's row names"])
    written = json.loads(out.read_text())
    assert written["notes"] == ["FCPTS's row: kept"] and written["rows"] == [row]
