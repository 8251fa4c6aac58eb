"""The committed re-runs of one record per method (the retired rerun-sample benchmark): a row for every method
registered when it ran, each re-run matched or its difference shown to be the processor's by a re-run of a record made
on this one, the provenance stated, and the notebook's numbers the output's. Reads the outputs only; re-runs nothing."""

from __future__ import annotations

import json
import re

import pytest

from fcpts.methods.registry import label, list_methods
from tasks.grid.paths import REPO_ROOT, RESULTS_DIR
from tests.results.git_history import committed_path, is_ancestor, json_at

OUT = RESULTS_DIR / "benchmarks" / "rerun_sample_cpu.json"
SAME_PROCESSOR = RESULTS_DIR / "benchmarks" / "rerun_sample_cpu_this_processor.json"
SAME_PROCESSOR_AMD = RESULTS_DIR / "benchmarks" / "rerun_sample_cpu_this_processor_amd.json"
FLAT_MASKS_AMD = RESULTS_DIR / "benchmarks" / "rerun_sample_cpu_this_processor_amd_flat_masks.json"
AT_COMMIT = RESULTS_DIR / "benchmarks" / "rerun_at_commit_cpu.json"
AT_COMMIT_AMD = RESULTS_DIR / "benchmarks" / "rerun_at_commit_cpu_amd.json"
AT_COMMIT_AMD_PLUS = RESULTS_DIR / "benchmarks" / "rerun_at_commit_cpu_amd_fcpts_plus.json"
NOTEBOOK = REPO_ROOT / "docs" / "notebook" / "reruns.md"
BEFORE_REMAKE = "1be3808"  # the last commit holding the learned-mask records (and their re-runs) made again since
BEFORE_OBS_REMAKE = "755ac97"  # the last commit holding the OBS records made before 7302f36, and their re-runs
ROW_FIELDS = (
    "record",
    "cell_wall_s",
    "cell_cpu_s",
    "old_mask_sha256",
    "new_mask_sha256",
    "old_value",
    "new_value",
    "match",
    "old_device",
    "new_device",
)


def _read(path):
    return json.loads(path.read_text())


def _ran(out: dict) -> list[dict]:
    return [r for r in out["rows"] if r["status"] == "ran"]


def processor(device: str) -> str:
    """`cpu: AMD EPYC` of `cpu: AMD EPYC, 1 threads`: what a device string says about the processor alone."""
    return device.split(",")[0].strip()


def recorded_kernels(record: dict) -> str | None:
    """The kernels and generation the record's machine ran (None: the record predates them)."""
    return record.get("environment", {}).get("cpu")


def _output_at(commit: str, path) -> dict:
    """An output as it stood at `commit` (BEFORE_REMAKE, BEFORE_OBS_REMAKE): what the notebook's history quotes."""
    return json_at(commit, committed_path(path))


def _notebook() -> str:
    return " ".join(NOTEBOOK.read_text().split())


@pytest.mark.parametrize("path", [OUT, SAME_PROCESSOR, SAME_PROCESSOR_AMD, FLAT_MASKS_AMD], ids=lambda p: p.stem)
def test_provenance_and_each_row_s_fields_are_there(path):
    out = _read(path)
    prov = out["provenance"]
    assert re.fullmatch(r"[0-9a-f]{40}", prov["git_commit"]), prov["git_commit"]
    assert re.match(r"python -m benchmarks\.(code\.)?rerun_sample ", prov["command"])  # its name when it ran
    assert prov["device"].startswith("cpu: ") and prov["torch"] and prov["omp_num_threads"] == "1"
    for row in _ran(out):
        missing = [f for f in ROW_FIELDS if f not in row]
        assert not missing, (row["method"], missing)
        assert row["cell_wall_s"] > 0 and re.fullmatch(r"[0-9a-f]{64}", row["new_mask_sha256"])
        assert row["match"] == (row["numbers_match"] and row["old_mask_sha256"] in (None, row["new_mask_sha256"]))
    ran = _ran(out)
    assert out["summary"] == {
        "methods": len(out["rows"]),
        "matched": sum(r["match"] for r in ran),
        "differed": sum(not r["match"] for r in ran),
        "skipped": len(out["rows"]) - len(ran),
        "cpu_s": round(sum(r["cell_cpu_s"] for r in ran), 1),
        "wall_s": round(sum(r["cell_wall_s"] for r in ran), 1),
    }


@pytest.mark.parametrize("path", [OUT, SAME_PROCESSOR, SAME_PROCESSOR_AMD, FLAT_MASKS_AMD], ids=lambda p: p.stem)
def test_the_table_beside_each_output_states_its_counts_commit_and_a_row_per_method(path):
    """The benchmark that wrote both is retired: its table must still be the one made beside this JSON."""
    out, table = _read(path), path.with_suffix(".md").read_text()
    s = out["summary"]
    assert f"last written at commit {out['provenance']['git_commit'][:12]} " in table.splitlines()[0]
    assert f"{s['matched']} matched, {s['differed']} differed, {s['skipped']} skipped; {s['cpu_s']:.0f} s CPU" in table
    assert [line.split(" | ")[0].lstrip("| ") for line in table.splitlines()[4:]] == [r["method"] for r in out["rows"]]


def test_one_row_per_registered_method_each_run_or_skipped_with_its_reason():
    rows = _read(OUT)["rows"]
    methods = [r["method"] for r in rows]
    assert methods == [m for m in list_methods() if m in methods]  # registry order; a method born since has no row
    for row in rows:
        assert row["status"] in ("ran", "skipped")
        if row["status"] == "skipped" and "old_wall_s" in row:
            assert len(row["reason"]) > 20, row


def test_every_re_run_matched_or_differs_only_across_processors():
    """A record made on another processor may differ (a training method's float sums); then the same method's
    record made on this processor must re-run to its mask, or no such record exist."""
    same = {r["method"]: r for r in _read(SAME_PROCESSOR)["rows"]}
    for row in _ran(_read(OUT)):
        if row["match"]:
            continue
        assert processor(row["old_device"]) != processor(row["new_device"]), row["method"]
        check = same[row["method"]]
        if check["status"] == "ran":
            assert check["match"] and check["old_mask_sha256"], check
            assert processor(check["old_device"]) == processor(check["new_device"])
        else:
            assert "made on another processor" in check["reason"], check


def test_the_same_processor_re_runs_all_matched_with_a_mask_hash():
    ran = _ran(_read(SAME_PROCESSOR))
    assert ran and all(r["match"] and r["hash_match"] for r in ran)


def test_the_notebook_states_the_output_s_numbers():
    text = NOTEBOOK.read_text()
    s, same = _read(OUT)["summary"], _read(SAME_PROCESSOR)["summary"]
    stated = re.search(
        r"(\d+) of (\d+) registered methods re-ran to the same result, (\d+) differed and (\d+) (?:was|were) skipped",
        text,
    )
    assert stated, "the notebook's summary sentence is missing"
    assert tuple(map(int, stated.groups())) == (s["matched"], s["methods"], s["differed"], s["skipped"])
    cpu = re.search(r"(\d+) minutes of CPU time", text)
    amd = _read(SAME_PROCESSOR_AMD)["summary"]
    assert cpu and int(cpu.group(1)) == round((s["cpu_s"] + same["cpu_s"] + amd["cpu_s"]) / 60)
    stated_same = re.search(r"(\d+) of (\d+) re-ran to the same mask hash on this processor", text)
    assert stated_same
    assert tuple(map(int, stated_same.groups())) == (same["matched"], same["matched"] + same["differed"])


def test_the_notebook_s_other_numbers_are_the_output_s():
    text = _notebook()
    rows = {r["method"]: r for r in _read(OUT)["rows"]}
    quoted = []
    for row in rows.values():
        if row["status"] == "ran" and not row["match"]:
            quoted.append(f"top-1 {row['old_value']:.2f} became {row['new_value']:.2f}")
        if row["status"] == "skipped" and "old_wall_s" in row:
            quoted.append(f"{row['old_wall_s']:,.0f} s")
            quoted.append(re.search(r"limit of (\d+) s", row["reason"]).group(1) + " s limit per cell")
    quoted.append(f"mAP at {rows['uniform']['new_value']:.2f} and {rows['erk']['new_value']:.2f}")
    stra = rows["str"]  # its re-run resumed over sessions: the record's wall time, this part's CPU time
    quoted.append(f"over more than one session, {stra['new_wall_s']:,.0f} s in all): the same mask hash, top-1 and")
    quoted.append(f"for STR only its last session's part, {stra['cell_cpu_s']:,.0f} s")
    assert stra["match"] and stra["hash_match"] and processor(stra["old_device"]) == processor(stra["new_device"])
    # the record before it, re-run on the Intel Xeon
    older = {r["method"]: r for r in _output_at(BEFORE_OBS_REMAKE, OUT)["rows"]}["str"]
    quoted.append(f"STR's only records, made on the AMD EPYC before the mask hash, took {older['old_wall_s']:,.0f} s")
    quoted.append(f"over more than one session, {older['new_wall_s']:,.0f} s in all, and differed the least")
    quoted.append(f"top-1 {older['old_value']:.2f} became {older['new_value']:.2f}, achieved sparsity")
    old_sparsity, new_sparsity = older["old_achieved_sparsity"], older["new_achieved_sparsity"]
    quoted.append(f"achieved sparsity {old_sparsity:.5f} became {new_sparsity:.5f}")
    plus = rows["fcpts-plus"]
    quoted.append(f"{plus['old_wall_s']:.0f} s became {plus['new_wall_s']:.0f} s")
    quoted.append(f"{plus['new_wall_s'] / plus['old_wall_s']:.1f} times slower")
    missing = [q for q in quoted if q not in text]
    assert not missing, missing


def test_the_re_runs_of_the_records_made_again_are_the_notebook_s_history():
    """The learned-mask records made again: their re-runs now match on the processor that made them, and the
    notebook's account of the earlier records (re-run elsewhere, and at their commit) is what those outputs said."""
    now = {r["method"]: r for r in _read(OUT)["rows"]}
    before = {r["method"]: r for r in _output_at(BEFORE_REMAKE, OUT)["rows"]}
    at_commit = {r["record"]: r for r in _read(AT_COMMIT)["rows"]}
    text = _notebook()
    for method in ("fcpts-fixed", "probmask"):
        row, old = now[method], before[method]
        assert row["match"] and row["hash_match"], row
        assert processor(row["old_device"]) == processor(row["new_device"]) == "cpu: AMD EPYC"
        assert row["record"] == old["record"] and row["old_created"] != old["old_created"]
        assert f"top-1 {old['old_value']:.2f} became {old['new_value']:.2f}" in text, method
        check = at_commit[old["record"]]
        where = processor(check["record_device"]).removeprefix("cpu: ")
        for quoted in (
            f"top-1 {check['old_here_value']:.2f} here ({check['record_value']:.2f} on the {where})",
            f"{100 * check['positions_differing_old_vs_today']:.2f}% of the weights' positions",
            f"what moved it: {check['verdict'].split(':')[0]}",
            f"`{method}` made again: top-1 {row['old_value']:.2f}, {row['old_wall_s']:,.0f} s, re-ran to its mask hash",
        ):
            assert quoted in text, (method, quoted)


def test_each_re_run_at_its_record_s_commit_agrees_with_the_records():
    out = _read(AT_COMMIT)
    prov = out["provenance"]
    assert re.fullmatch(r"[0-9a-f]{40}", prov["git_commit"]) and prov["omp_num_threads"] == "1", prov
    assert prov["command"].startswith("python -m benchmarks.code.rerun_at_commit ")
    assert out["rows"]
    for row in out["rows"]:
        record = json_at(BEFORE_REMAKE, row["record"])
        assert (row["record_commit"], row["record_device"]) == (record["git_commit"], record["device"])
        assert row["record_value"] == record["metrics"][row["metric"]]
        assert row["record_model_sha256"] == record["sparse_model"]["sha256"]
        assert processor(row["old_here_device"]) == processor(prov["device"]) != processor(row["record_device"])
        assert row["old_here_command"].startswith(f"python -m tasks.{record['task']} ")
        same_as_record = row["old_here_model_sha256"] == row["record_model_sha256"]
        if not same_as_record:  # by file hash alone (no mask hash then): the notebook's 'whatever the bytes'
            assert row["old_here_value"] != row["record_value"], row["record"]
        same_as_today = row["old_here_pattern_sha256"] == row["today_pattern_sha256"]
        assert same_as_today == (row["positions_differing_old_vs_today"] == 0.0)


def test_every_difference_not_checked_on_this_processor_is_re_run_at_its_commit_and_stated():
    """A re-run that differed, with no record of its method made here to re-run, is explained by the record's own
    code run here, and the notebook states what that found; until then the notebook says it has not been."""
    same = {r["method"]: r for r in _read(SAME_PROCESSOR)["rows"]}
    at_commit = {r["record"]: r for r in _read(AT_COMMIT)["rows"]}
    text = _notebook()
    for row in _ran(_read(OUT)):
        if row["match"] or same[row["method"]]["status"] == "ran":
            continue
        check = at_commit.get(row["record"])
        if check is None:  # not run there yet: the notebook says so, and what the re-run here measured
            assert f"{label(row['method'])} has not been re-run at its record's commit here" in text, row["method"]
            assert (
                f"achieved sparsity {row['old_achieved_sparsity']:.5f} became {row['new_achieved_sparsity']:.5f}"
                in text
            )
            continue
        where = processor(check["record_device"]).removeprefix("cpu: ")
        for quoted in (
            f"top-1 {check['old_here_value']:.2f} here ({check['record_value']:.2f} on the {where})",
            f"{100 * check['positions_differing_old_vs_today']:.2f}% of the weights' positions",
            f"what moved it: {check['verdict'].split(':')[0]}",
        ):
            assert quoted in text, (row["method"], quoted)


def test_the_notebook_s_minutes_and_collapse_are_the_at_commit_output_s():
    rows = _read(AT_COMMIT)["rows"]
    text = _notebook()
    minutes = " and ".join(f"{r['old_here_wall_s'] / 60:.0f}" for r in rows)
    assert f"({minutes} minutes a run here)" in text
    assert "none of the six models keeps 1% top-1" in text and len(rows) == 2
    assert all(max(r["record_value"], r["old_here_value"]) < 1 for r in rows)
    rerun = {r["record"]: r for r in _output_at(BEFORE_REMAKE, OUT)["rows"]}
    assert all(rerun[r["record"]]["new_value"] < 1 for r in rows), "today's models collapsed too"


def test_fcpts_fixed_re_run_on_its_record_s_processor_is_the_notebook_s():
    """FCPTS with fixed allocation's record, made on an AMD EPYC, re-run there with today's code: the notebook's
    numbers and its reading (same top-1 and sparsity, another model) are the output's."""
    out = _output_at(BEFORE_REMAKE, SAME_PROCESSOR_AMD)
    (row,) = _ran(out)
    assert row["method"] == "fcpts-fixed" and processor(row["old_device"]) == processor(row["new_device"])
    assert processor(out["provenance"]["device"]) == processor(row["old_device"]) == "cpu: AMD EPYC"
    assert row["old_achieved_sparsity"] == row["new_achieved_sparsity"] and not row["numbers_match"]
    text = _notebook()
    assert f"top-1 {row['old_value']:.2f} became {row['new_value']:.2f}, at the same achieved sparsity, yet" in text


def test_the_records_made_on_an_amd_epyc_re_run_there_as_the_notebook_says():
    """FCPTS's and OBS's records, made on an AMD EPYC and differing on the Intel Xeon, re-run on an AMD EPYC: FCPTS
    to its mask hash (the processor moved it), OBS not (its commit run there places the difference in the code).
    The outputs as they stood before OBS's records were made again."""
    out = _output_at(BEFORE_OBS_REMAKE, SAME_PROCESSOR_AMD)
    rows = {r["method"]: r for r in _ran(out)}
    assert set(rows) == {"fcpts", "obs"}
    assert all(processor(r["old_device"]) == processor(r["new_device"]) == "cpu: AMD EPYC" for r in rows.values())
    assert rows["fcpts"]["match"] and rows["fcpts"]["hash_match"]
    intel = {r["method"]: r for r in _output_at(BEFORE_OBS_REMAKE, OUT)["rows"]}
    assert rows["fcpts"]["record"] == intel["fcpts"]["record"] and not intel["fcpts"]["match"]
    obs, text = rows["obs"], _notebook()
    assert obs["record"] == intel["obs"]["record"] and not obs["match"]
    assert f"on an AMD EPYC today's code gives top-1 {obs['new_value']:.2f}" in text
    assert intel["obs"]["new_mask_sha256"] != obs["new_mask_sha256"] != obs["old_mask_sha256"]
    assert f"re-runs the AMD record to its own mask hash (top-1 {rows['fcpts']['new_value']:.2f})" in text


def test_obs_s_record_run_by_its_commit_on_an_amd_epyc_places_the_difference_in_the_code():
    """OBS's AMD record, whose tree was dirty, run by its commit on an AMD EPYC: the record's mask hash and numbers
    again, today's code another mask: the code since moved it; the notebook says so with the output's numbers."""
    out = _read(AT_COMMIT_AMD)
    prov = out["provenance"]
    assert re.fullmatch(r"[0-9a-f]{40}", prov["git_commit"]) and prov["omp_num_threads"] == "1", prov
    (row,) = out["rows"]
    record = json_at(BEFORE_OBS_REMAKE, row["record"])  # the record as it was before it was made again
    before = {r["method"]: r for r in _output_at(BEFORE_OBS_REMAKE, OUT)["rows"]}
    assert row["method"] == "obs" and row["record"] == before["obs"]["record"]
    assert (row["record_commit"], row["record_device"]) == (record["git_commit"], record["device"])
    assert row["record_commit"].endswith("+dirty")
    assert processor(row["old_here_device"]) == processor(prov["device"]) == processor(record["device"])
    assert row["compared_by"] == "mask hash and numbers" and row["record_mask_sha256"] == record["mask_sha256"]
    same = row["old_here_mask_sha256"] == record["mask_sha256"] and row["old_here_value"] == record["metrics"]["top1"]
    assert row["same_as_record"] == same
    text = _notebook()
    for quoted in (
        f"its commit, run on this AMD EPYC without those changes, makes the record's mask and numbers again (top-1 "
        f"{row['old_here_value']:.2f};",
        f"differs from it in {100 * row['positions_differing_old_vs_today']:.2f}% of the weights' positions",
        f"what moved it: {row['verdict'].split(':')[0]}",
    ):
        assert quoted in text, quoted


def test_the_notebook_quotes_the_remade_str_record():
    path = "results/runs/imagenet/imagenet-val1300/efficientnet_lite0/str-sp50-cpu-seed0.json"
    record, before = json.loads((REPO_ROOT / path).read_text()), json_at(BEFORE_REMAKE, path)
    text = _notebook()
    assert record["git_commit"].startswith("44d3779") and record["mask_sha256"]
    quoted = (
        f"a clean checkout at {record['git_commit'][:7]}, its five trials resumed over two sessions, "
        f"{record['wall_s']:,.0f} s): top-1 {record['metrics']['top1']:.2f}, top-5 {record['metrics']['top5']:.2f}"
    )
    assert quoted in text and f"achieved sparsity {record['achieved_sparsity']:.5f}, now with a mask hash" in text
    row = next(r for r in _read(OUT)["rows"] if r["method"] == "str")  # the row re-ran the record before it
    assert row["record"] == path.removeprefix("results/") or row["record"].endswith("str-sp50-cpu-seed0.json")
    assert not before.get("mask_sha256") and f"(was {before['metrics']['top5']:.2f})" in text


def test_the_notebook_names_the_commit_the_obs_bisect_found():
    text = (RESULTS_DIR / "benchmarks" / "obs_bisect_amd.txt").read_text()
    first_bad = re.search(r"^([0-9a-f]{40}) is the first bad commit$", text, re.M).group(1)
    steps = re.findall(r"^\d\d:\d\d:\d\d ([0-9a-f]{7}) ([0-9a-f]{64})$", text, re.M)
    good = "6452629e6b10e600502f0702b7c6d1abdb996eacdfaff1c77976334a1615a299"  # the record's mask hash
    record = json_at(BEFORE_OBS_REMAKE, "results/runs/cifar/cifar100/resnet32/obs-sp70-paper-cpu-seed0.json")
    assert record["mask_sha256"] == good
    assert (first_bad[:7], good) not in steps and any(c == first_bad[:7] for c, _ in steps)  # it ran and differed
    assert any(h == good for _, h in steps)  # an older commit made the record's mask
    notebook = _notebook()
    assert (
        f"the cell run at each of {len(steps)} commits" in notebook and f"names the change: {first_bad[:7]}" in notebook
    )


OBS_SUMMATION_CHANGE = "7302f36"  # the bisect's first bad commit: each layer's Hessian summed a few images at a time
OBS_REMADE = [
    *(
        f"results/runs/cifar/{dataset}/{model}/obs-sp{percent}-paper-cpu-seed0.json"
        for dataset, model, percents in (
            ("cifar10", "resnet32", (70, 80, 90)),
            ("cifar10", "resnet56", (70, 80)),
            ("cifar100", "resnet32", (70, 80)),
            ("cifar100", "resnet56", (70, 80, 90)),
        )
        for percent in percents
    ),
    "results/runs/imagenet/imagenet-val1300/efficientnet_lite0/obs-sp50-cpu-seed0.json",
]


def _code_commit(record: dict) -> str:
    return record["git_commit"].removesuffix("+dirty")


def test_the_obs_records_made_before_the_summation_change_are_made_again_as_the_notebook_s_table_says():
    """The AMD EPYC's OBS records that predate the change the bisect found, made again on an AMD EPYC from a clean
    checkout with the change; the notebook's table is theirs, before and now."""
    text, moved, made_at, metric = NOTEBOOK.read_text(), [], [], "top1"
    for path in OBS_REMADE:
        before, now = json_at(BEFORE_OBS_REMAKE, path), _read(REPO_ROOT / path)
        assert processor(before["device"]) == processor(now["device"]) == "cpu: AMD EPYC", path
        assert not is_ancestor(OBS_SUMMATION_CHANGE, _code_commit(before)), path
        assert not now["git_commit"].endswith("+dirty") and now["mask_sha256"], path  # a clean checkout's code
        assert is_ancestor(OBS_SUMMATION_CHANGE, now["git_commit"]), path
        made_at.append(now["git_commit"][:7])
        same = "yes" if now["mask_sha256"] == before["mask_sha256"] else "no"
        row = (
            f"| {now['dataset']} {now['model']} {100 * now['target_sparsity']:.0f}% | "
            f"{before['metrics'][metric]:.2f} | {now['metrics'][metric]:.2f} | {same} | {now['wall_s']:.0f} |"
        )
        assert row in text, row
        if same == "no":
            moved.append(abs(now["metrics"][metric] - before["metrics"][metric]))
    assert f"The bisect left {len(OBS_REMADE)} OBS records on the AMD EPYC" in text
    commits = set(made_at[:3]), set(made_at[3:])  # CIFAR-10 ResNet-32's cells, then the rest
    assert [len(c) for c in commits] == [1, 1], commits
    (first,), (rest,) = commits
    prose = _notebook()
    assert f"at {first} for CIFAR-10 ResNet-32, at {rest} for the rest" in prose
    stated = f"moved {len(moved)} masks of {len(OBS_REMADE)}, by at most {max(moved):.2f} top-1 points"
    assert stated in prose, stated


def test_no_amd_obs_record_predates_the_summation_change():
    for path in sorted(RESULTS_DIR.glob("runs/*/*/*/obs-*.json")):
        record = _read(path)
        if processor(record["device"]) == "cpu: AMD EPYC":
            assert is_ancestor(OBS_SUMMATION_CHANGE, _code_commit(record)), path


def test_obs_s_rows_now_re_run_to_their_mask_hash_as_the_notebook_says():
    """OBS's records made again: the sample's row (now an Intel record, the cheapest) and the AMD EPYC's own."""
    row = {r["method"]: r for r in _read(OUT)["rows"]}["obs"]
    amd = {r["method"]: r for r in _read(SAME_PROCESSOR_AMD)["rows"]}["obs"]
    assert row["match"] and row["hash_match"] and amd["match"] and amd["hash_match"]
    record, remade = _read(REPO_ROOT / row["record"]), _read(REPO_ROOT / amd["record"])
    assert processor(record["device"]) != processor(row["new_device"]) == processor(amd["new_device"])
    assert amd["record"] in OBS_REMADE and not is_ancestor(OBS_SUMMATION_CHANGE, _code_commit(record))
    text = _notebook()
    for quoted in (
        f"({record['wall_s']:.0f} s; the {100 * remade['target_sparsity']:.0f}% cell made again took "
        f"{remade['wall_s']:.0f} s, beside another run), made at {record['git_commit'][:7]}, before the summation",
        f"re-ran it on the AMD EPYC to its mask hash (top-1 {row['new_value']:.2f})",
        f"re-ran to its mask hash too (top-1 {amd['new_value']:.2f})",
    ):
        assert quoted in text, quoted


def test_the_fcpts_plus_record_differs_on_this_amd_generation_by_the_processor_as_the_notebook_says():
    """An 'AMD EPYC' record that re-ran on the Intel Xeon differs on the AMD EPYC lent since; its own commit run here
    makes today's mask, not the record's."""
    out = _read(AT_COMMIT_AMD_PLUS)
    assert out["provenance"]["command"].startswith("python -m benchmarks.code.rerun_at_commit ")
    (row,) = out["rows"]
    record = json.loads((REPO_ROOT / row["record"]).read_text())
    assert row["method"] == "fcpts-plus" and recorded_kernels(record) is None  # made before records named it
    assert (row["record_commit"], row["record_value"]) == (record["git_commit"], record["metrics"]["top1"])
    assert row["record_mask_sha256"] == record["mask_sha256"] != row["old_here_mask_sha256"]
    assert processor(row["old_here_device"]) == processor(record["device"]) == "cpu: AMD EPYC"
    assert row["positions_differing_old_vs_today"] == 0.0
    text = _notebook()
    for quoted in (
        f"top-1 {row['record_value']:.2f} became {row['old_here_value']:.2f}, and its zeros differ from today's "
        f"code's in {100 * row['positions_differing_old_vs_today']:.2f}% of the weights' positions",
        f"what moved it: {row['verdict'].split(':')[0]}",
    ):
        assert quoted in text, quoted


def test_the_records_re_ran_bit_for_bit_after_the_masks_went_flat():
    """The masks and the bridge's counts moved onto flat tensors of all layers (6e72cc5): the sampled records of
    FCPTS and POT re-ran to their mask hashes and numbers after it, on the processor that made them."""
    out = _read(FLAT_MASKS_AMD)
    assert is_ancestor("6e72cc5", out["provenance"]["git_commit"])
    assert {row["method"]: row["match"] for row in out["rows"]} == {"fcpts": True, "pot-l2norm": True, "pot-erk": True}
    assert (
        "rerun_sample_cpu_this_processor_amd_flat_masks.md"
        in (REPO_ROOT / "docs" / "notebook" / "benchmarks.md").read_text()
    )
