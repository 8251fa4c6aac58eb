"""Numbers quoted in the README and docs/ against the committed records and benchmark outputs they come from.

Every number a user reads is generated from a committed record or benchmark output; these tests check the
quoted tables and blocks that are easy to check mechanically (the README's generated blocks:
tests/results/test_readme.py): docs/tasks.md's `make run` sentence, the drops-vs-paper table of the results
notebook, the ablation tables (`tasks.reporting.ablations`), the
runtime table of docs/notebook/runtimes.md (Table 7's raw data), the EfficientNet-Lite0 table of
docs/notebook/results.md,
and every fenced block that quotes a file under results/benchmarks/ (each of its lines must be in that file, verbatim).
Beyond those, every number with two decimals in the notebook (the form of its top-1s, drops and spreads) must be one
that a committed record or output holds (`held_numbers`), or be listed in NOT_HELD with how it is made.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
from pathlib import Path

import pytest

from tasks.grid.paths import REPO_ROOT, RESULTS_DIR
from tasks.grid.record_options import earlier_defaults, effective_options
from tasks.grid.records import all_records, preferred_records, read_record
from tasks.reporting.ablations import summarize, summarize_seeds
from tests.results.git_history import _needs_history, record_at, text_at

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
NOTEBOOK = DOCS / "notebook"  # findings and ablations
RUNS = RESULTS_DIR / "runs"


def _record(path: str) -> dict:
    return read_record(RUNS / path)  # whole: its per-layer rows and report read back from its detail file


TWO_DECIMALS = re.compile(r"(?<![\w.])\d+\.\d\d(?![\w.]*\d)")  # 90.84, not 0.9000, 1.14.1 or a hash's digits


def _two_decimals(value: float) -> str:
    return f"{abs(value):.2f}"


HISTORY = [  # (commit, files): records and outputs the notebook quotes as an earlier commit held them
    ("ee2d0fe", "results/runs/cifar/*/*/fcpts-plus-*.json"),  # FCPTS+ at block weight 1
    ("c551df6", "results/runs/cifar/*/*/fcpts-plus-*.json"),  # FCPTS+ at temperature 8
    ("755ac97", "results/runs/*/*/*/obs-*.json"),  # obs before the chunked sums
    ("1b00606", "results/runs/imagenet/*/efficientnet_lite0/fcpts-plus-*.json"),  # FCPTS+ on Lite0 with the ramp
    ("a4938de", "results/runs/cifar/*/*/fcpts-plus-sp70-*.json"),  # FCPTS+ at 70% with the ramp
    ("3021af6", "results/benchmarks/step_ops_cpu.txt"),  # the first operator counts
]
ABLATIONS = [  # results/ablations/: the results notebook's table, by `--summarize`
    "resnet20-sp90.jsonl",
    "resnet56-sp90.jsonl",
    "resnet56-sp90-a.jsonl",
    "resnet56-sp90-b.jsonl",
    "resnet56-sp90-1600.jsonl",
]
PROTOCOL_ABLATIONS = ["resnet32-sp90-protocol.jsonl", "cifar100-resnet56-sp90.jsonl"]  # by `--summarize-seeds`


def held_numbers() -> set[str]:
    """Every two-decimal number a committed record or output holds: the numbers written in any file under results/
    (benchmark outputs, tables, the paper's numbers), each numeric value of a JSON file or JSON line (a record's:
    its metrics and dense metrics) to two decimals, the records' metrics at the commits of HISTORY (as the notebook
    quotes them), and what the notebook derives from a record: its drop from dense, its achieved sparsity in
    percent, and over a cell's seeds (records that differ only in the seed) the mean and sd of its top-1 and of its
    drop; and the ablation tables summarised from results/ablations/. About four in ten two-decimal numbers under
    100 are held by something, so a wrong number is caught most of the time, not always."""
    held: set[str] = set()
    seeds: dict[str, list[dict]] = {}

    def leaves(value: object) -> None:
        if isinstance(value, dict):
            [leaves(v) for v in value.values()]
        elif isinstance(value, list):
            [leaves(v) for v in value]
        elif isinstance(value, float):
            held.add(_two_decimals(value))

    for path in sorted(RESULTS_DIR.rglob("*")):
        if path.suffix not in {".json", ".jsonl", ".txt", ".md", ".csv", ".tex", ".log"} or not path.is_file():
            continue
        text = path.read_text()
        if path.suffix not in {".json", ".jsonl"}:
            held.update(re.findall(r"\d+\.\d\d(?!\d)", text))
        for line in text.splitlines() if path.suffix == ".jsonl" else [text] if path.suffix == ".json" else []:
            value = json.loads(line)
            if not (isinstance(value, dict) and "metrics" in value):  # a record's other numbers: loss curves, times
                leaves(value)
            if isinstance(value, dict) and "metrics" in value and "dense_metrics" in value:
                dense, metrics = value["dense_metrics"], value["metrics"]
                leaves([metrics, dense])
                held.update(_two_decimals(dense[k] - v) for k, v in metrics.items() if isinstance(dense.get(k), float))
                if isinstance(value.get("achieved_sparsity"), float):
                    held.add(_two_decimals(100 * value["achieved_sparsity"]))
                seeds.setdefault(re.sub(r"seed\d+", "seed*", str(path)), []).append(value)
            elif isinstance(value, dict) and isinstance(value.get("metrics"), dict):  # a record without a dense one
                leaves(value["metrics"])
    ablations = [str(RESULTS_DIR / "ablations" / name) for name in ABLATIONS]
    summaries = [summarize(ablations)] + [
        summarize_seeds([str(RESULTS_DIR / "ablations" / n)]) for n in PROTOCOL_ABLATIONS
    ]
    held.update(re.findall(r"\d+\.\d\d(?!\d)", "\n".join(summaries)))
    for commit, files in HISTORY:
        metric = r'"(?:top1|top5)": \K\d+\.\d+' if files.endswith(".json") else r"\d+\.\d\d(?!\d)"  # records: metrics
        grep = ["git", "grep", "-ohP", metric, commit, "--", files]
        found = subprocess.run(grep, cwd=REPO_ROOT, capture_output=True, text=True)
        if found.returncode != 0:
            _needs_history(f"needs git history holding {commit} ({found.stderr.strip() or 'nothing found'})")
        held.update(_two_decimals(float(n)) for n in found.stdout.split())
    for records in seeds.values():
        top1 = [r["metrics"].get("top1") for r in records]
        if len(records) > 1 and all(isinstance(t, float) for t in top1):
            drops = [r["dense_metrics"]["top1"] - t for r, t in zip(records, top1)]
            held.update(_two_decimals(f(v)) for f in (statistics.mean, statistics.stdev) for v in (top1, drops))
    return held


# Two-decimal numbers the notebook quotes that no committed file holds as written, each with how it is made.
NOT_HELD: dict[str, dict[str, str]] = {
    "benchmarks.md": {"7.34": "largest ratio of a probe's whole-scaled minutes to its split projection, scale outputs"},
    "beyond-the-paper.md": {
        "6.45": "the ramp's mean minus block weight 8's in cifar100-resnet56-sp90.jsonl's table (59.90 - 53.45)",
        "60.76": "mean of FCPTS+'s CIFAR-100 ResNet-32 90% seeds 0-2 as commit ee2d0fe held them",
        "3.75": "FCPTS top-1 minus OBS top-1 on a Table 2 cell (test_obs_against_fcpts_on_table2_is_the_records)",
        "26.78": "FCPTS top-1 minus OBS top-1 on a Table 2 cell (test_obs_against_fcpts_on_table2_is_the_records)",
        "27.98": "FCPTS top-1 minus OBS top-1 on a Table 2 cell (test_obs_against_fcpts_on_table2_is_the_records)",
    },
    "heldout-choices.md": {"86.95": "mean of seeds 0-1 of results/benchmarks/heldout_fcpts_plus_cpu_90.json's ramp=0"},
    "pot-vs-msbench.md": {
        "7.92": "not folded minus folded, two records (tests/results/test_pot_doc.py)",
        "11.21": "not folded minus folded, two records (tests/results/test_pot_doc.py)",
    },
    "results.md": {
        "5.30": "the records' bytes in their former inline layout, computed by tests/results/test_record_files.py",
        "99.99": "the 70% ProbMask record's scores_undecided_fraction 0.99999783, cut to two decimals",
    },
}


def unheld_numbers(text: str, held: set[str]) -> list[str]:
    return [n for n in TWO_DECIMALS.findall(text) if n not in held]


def test_every_two_decimal_number_in_the_notebook_is_held():
    held = held_numbers()
    found = {doc.name: set(unheld_numbers(doc.read_text(), held)) for doc in sorted(NOTEBOOK.glob("*.md"))}
    unlisted = {name: sorted(numbers - set(NOT_HELD.get(name, {}))) for name, numbers in found.items()}
    assert not any(unlisted.values()), f"quoted, but no record or output holds them: {unlisted}"
    stale = {name: sorted(set(listed) - found.get(name, set())) for name, listed in NOT_HELD.items()}
    assert not any(stale.values()), f"listed in NOT_HELD but no longer quoted: {stale}"


def test_a_number_no_record_holds_is_found():
    held = held_numbers()
    assert unheld_numbers("POT at 5k steps per layer: 77.39 top-1 (from 77.31).", held) == ["77.39", "77.31"]
    assert unheld_numbers("90.84 top-1 (drop 1.79; 0.9000 of the weights, numpy 1.14.1)", held) == []


def _table_rows(text: str, first_cell: str) -> list[list[str]]:
    """The cells of every markdown table row whose first cell starts with `first_cell`."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells[0].startswith(first_cell):
            rows.append(cells)
    return rows


def test_drops_table_in_the_results_notebook_is_the_generated_one():
    """The drop-from-dense comparison with the paper (docs/notebook/results.md) is results/tables/drops_vs_paper.md's
    table."""
    generated = (RESULTS_DIR / "tables" / "drops_vs_paper.md").read_text().splitlines()
    table = [line for line in generated if line.startswith("|")]
    assert len(table) == 10
    text = (NOTEBOOK / "results.md").read_text()
    assert "\n".join(table) in text
    text = " ".join(text.split())
    assert "The faithful FCPTS misses the paper on every 80% and 90% cell, every seed." in text
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    # columns: cell, paper, our dense minus the paper's, FCPTS (mean), its verdict, FCPTS+ (mean), its verdict
    assert all(float(r[3].split()[0]) > float(r[1]) and r[4].endswith("seeds short") for r in rows), "claim broken"
    dense = [-float(r[2]) for r in rows]
    assert f"ours lie {min(dense):.2f}-{max(dense):.2f} points under" in text
    assert "closer than FCPTS on every CIFAR-10 cell" in text and "still short on CIFAR-100, every seed" in text
    cifar10 = [r for r in rows if r[0].startswith("CIFAR-10 ")]
    assert all(float(r[5].split()[0]) < float(r[3].split()[0]) for r in cifar10), "FCPTS+ is not closer everywhere"
    cifar100 = [r for r in rows if r[0].startswith("CIFAR-100 ")]
    assert all(r[6].endswith("all 3 seeds short") for r in cifar100), "FCPTS+ meets the paper on a CIFAR-100 cell"
    verdicts = {r[0]: r[6] for r in cifar10}
    assert verdicts["CIFAR-10 resnet32 80%"].startswith("within noise") and "0.11 short on ResNet-56 at 80%" in text
    assert verdicts["CIFAR-10 resnet56 80%"].startswith("0.11 short")
    assert all(verdicts[f"CIFAR-10 {m} 90%"].endswith("all 3 seeds better") for m in ("resnet32", "resnet56"))


def test_make_run_sentence_is_the_record():
    """docs/tasks.md's account of `make run`: the committed record of the same cell."""
    r = _record("cifar/cifar10/resnet56/fcpts-sp90-fast-seed0.json")
    text = " ".join((DOCS / "tasks.md").read_text().split())
    for quoted in (
        f"{r['metrics']['top1']:.2f}% top-1 at exactly {r['target_sparsity']:.0%} sparsity",
        f"(dense {r['dense_metrics']['top1']:.2f}%)",
        f"after {r['wall_s']:.0f} s of FCPTS and a {r['eval_s']:.0f} s evaluation",
    ):
        assert quoted in text, quoted
    cpu, threads = re.fullmatch(r"cpu: (.+), (\d+) threads", r["device"]).groups()  # "cpu: AMD EPYC, 2 threads"
    assert f"on {threads} threads of an {cpu} (the record's `device`)" in text
    make_run = next(line for line in README.read_text().splitlines() if line.startswith("make run "))
    assert f"(FCPTS: {r['wall_s'] / 60:.0f} min on a {threads}-thread {cpu})" in make_run, make_run


def test_ablation_table_is_the_ablation_records():
    files = [RESULTS_DIR / "ablations" / f for f in ABLATIONS]
    assert summarize([str(f) for f in files]) in (NOTEBOOK / "results.md").read_text()


@pytest.mark.parametrize("name", PROTOCOL_ABLATIONS)
def test_protocol_ablation_tables_are_their_records(name):
    path = RESULTS_DIR / "ablations" / name
    assert summarize_seeds([str(path)]) in (NOTEBOOK / "beyond-the-paper.md").read_text()


def test_runtime_survey_table_is_table7():
    raw = json.loads((RESULTS_DIR / "deploy" / "table7_inference.json").read_text())
    latency = raw["families"]["resnet18"]["latency"]
    survey = (NOTEBOOK / "runtimes.md").read_text()
    rows = {r[0].split()[0]: r[1:] for r in _table_rows(survey, "") if r[0] != "runtime"}
    assert set(latency) <= set(rows)
    for runtime, per_batch in latency.items():
        expected = [
            f"{per_batch['1']['results'][sp]['speedup']:.2f} / {per_batch['32']['results'][sp]['speedup']:.2f}"
            for sp in ("50%", "60%", "70%", "90%")
        ]
        assert rows[runtime] == expected, runtime


def test_lite0_table_in_results_doc_is_the_records():
    best = preferred_records(all_records(RUNS))
    text = (NOTEBOOK / "results.md").read_text()
    for method, row_label in (
        ("fcpts-plus", "FCPTS+ (200"),
        ("fcpts", "FCPTS (200"),
        ("obs", "OBS (second-order"),
        ("pot-l2norm", "POT L2Norm (1,000"),
        ("pot-erk", "POT ERK"),
        ("probmask", "ProbMask (200"),
    ):
        rows = _table_rows(text, row_label)
        assert len(rows) == 1, row_label
        expected = [
            f"{best[('imagenet', 'imagenet-val1300', 'efficientnet_lite0', method, sp)]['metrics']['top1']:.2f}"
            for sp in (0.5, 0.6, 0.7, 0.8, 0.9)
        ]
        assert rows[0][1 : len(expected) + 1] == expected, (method, rows[0][1:6], expected)


def _quoted_blocks() -> list[tuple[Path, Path, list[str]]]:
    """(doc, quoted file, block lines) for each fenced block whose preceding paragraph names a committed
    file under results/benchmarks/."""
    found = []
    for doc in [README, *sorted(DOCS.rglob("*.md"))]:
        text = doc.read_text()
        for m in re.finditer(r"^( *)```[a-z]*\n(.*?)^\1```", text, flags=re.S | re.M):
            before = text[: m.start()].rstrip().rsplit("\n\n", 1)[-1]
            names = re.findall(r"results/benchmarks/[\w./-]+\.txt", before)
            if names:
                indent = len(m.group(1))
                lines = [line[indent:] for line in m.group(2).rstrip("\n").splitlines()]
                found.append((doc, REPO_ROOT / names[-1], lines))
    return found


def test_quoted_benchmark_output_is_the_committed_output():
    blocks = _quoted_blocks()
    assert blocks, "no doc quotes a committed benchmark output"
    for doc, source, lines in blocks:
        assert source.is_file(), f"{doc.name} quotes {source}, which is not committed"
        committed = set(source.read_text().splitlines())
        for line in lines:
            assert line in committed, f"{doc.name}: {line!r} is not in {source.relative_to(REPO_ROOT)}"


def test_deploy_doc_quotes_the_deploy_record_and_table7():
    text = " ".join((DOCS / "deploy.md").read_text().split())
    dep = json.loads((RESULTS_DIR / "deploy" / "cifar10-resnet56-fcpts-sp90-fast-seed0.json").read_text())
    size, plain = dep["file_bytes"], dep["file_bytes"]["dense"]
    mantissa, exponent = f"{max(dep['max_abs_diff'].values()):.1e}".split("e")
    quoted = [
        f"top-1 {dep['top1_pytorch']:.2f} in PyTorch",
        f"max |diff| {mantissa}e{int(exponent)}",
        f"file {plain / 1e6:.2f} MB plain",
        f"{size['sparse_initializer'] / 1e6:.2f} MB sparse_initializer ({size['sparse_initializer'] / plain:.2f}x)",
        f"{size['bitmask'] / 1e6:.2f} MB bitmask ({size['bitmask'] / plain:.2f}x)",
        f"{size['dense_zlib'] / 1e6:.2f} MB plain + zlib",
    ]
    fams = json.loads((RESULTS_DIR / "deploy" / "table7_inference.json").read_text())["families"]

    def speedup(family: str, runtime: str, batch: str, sparsity: str) -> str:
        return f"{fams[family]['latency'][runtime][batch]['results'][sparsity]['speedup']:.2f}"

    ds = "deepsparse"
    mobilenet = " / ".join(speedup("mobilenet_v2", ds, "32", sp) for sp in ("50%", "60%", "70%", "90%"))
    lite0 = " / ".join(speedup("efficientnet_lite0", ds, "32", sp) for sp in ("50%", "60%", "70%"))
    r18 = fams["resnet18"]["latency"][ds]["1"]["results"]
    q25, _, q75 = r18["70%"]["round_ratio_q25_q50_q75"]
    quoted += [
        f"batch 32 on MobileNetV2 {mobilenet}x",
        f"ResNet-18 only at 90% ({speedup('resnet18', ds, '32', '90%')}x",
        f"at 90% {speedup('cifar10-resnet56', ds, '1', '90%')}x (batch 1) and "
        f"{speedup('cifar10-resnet56', ds, '32', '90%')}x (batch 32)",
        f"{lite0}x at 50 / 60 / 70%, batch 32",
        f"{r18['70%']['median_ms']:.2f} ms sparse against {r18['dense']['median_ms']:.2f} ms dense "
        f"({r18['70%']['speedup']:.2f}x, quartiles {q25:.2f}-{q75:.2f})",
    ]
    for q in quoted:
        assert q in text, q


def default_and_kl_ratios(step_time_output: str) -> list[str]:
    """The default loss's and the KL's step ratios of a CPU step_time output, in that order."""
    pattern = r"^fcpts step, (?:mse-blocks \(defaults\)|kl)\s*:.*ratio (\d+\.\d+)(?:, rounds .*)?$"
    return re.findall(pattern, step_time_output, re.M)


def test_benchmarks_doc_speed_sentence_is_the_benchmark_outputs():
    text = " ".join((NOTEBOOK / "benchmarks.md").read_text().split())
    step = (RESULTS_DIR / "benchmarks" / "step_time_cpu.txt").read_text()
    ratios = default_and_kl_ratios(step)
    assert f"misses it ({ratios[0]}; the paper's output-only KL {ratios[1]})" in text
    assert step in (NOTEBOOK / "benchmarks.md").read_text(), "the output as committed, in the doc's code block"
    load = re.search(r"load average at the end (\d+\.\d+)", step)
    assert load and f"(load average {load.group(1)} at the end)" in text
    amd = (RESULTS_DIR / "benchmarks" / "step_time_cpu_amd.txt").read_text()
    amd_ratios = default_and_kl_ratios(amd)
    assert "AMD EPYC" in amd and len(amd_ratios) == 2 and "+dirty" not in amd and "6 rounds" in amd
    assert f"it gives {amd_ratios[0]} and {amd_ratios[1]}, its rounds spanning" in text
    spread = re.findall(
        r"^fcpts step, (?:mse-blocks \(defaults\)|kl)\s*:.*, rounds (\d+\.\d+) to (\d+\.\d+)$", amd, re.M
    )
    assert len(spread) == 2
    assert f"spanning {spread[0][0]} to {spread[0][1]} and {spread[1][0]} to {spread[1][1]}" in text
    commits = ["9a8c6c8", "ee1b5ad", "11ff0f6", "baccbd6", "04cc05d", "3c51860"]
    earlier = [default_and_kl_ratios(text_at(c, "results/benchmarks/step_time_cpu_amd.txt")) for c in commits]
    default, kl = (
        [min(r[0] for r in earlier), max(r[0] for r in earlier)],
        [min(r[1] for r in earlier), max(r[1] for r in earlier)],
    )
    assert f"history at {', '.join(commits)}, one change" in text
    assert f"gave {default[0]}-{default[1]} and {kl[0]}-{kl[1]}, inside those spreads" in text
    teacher = re.search(r"^teacher forward alone .*, (\d+\.\d+) of the plain step .* below (\d+\.\d+)$", amd, re.M)
    assert teacher and f"is {teacher.group(1)} of a plain step there, a floor of {teacher.group(2)}" in text
    above = [float(r) - float(teacher.group(2)) for r in amd_ratios]  # this run: the KL's under the floor
    assert above[1] < 0 < above[0]
    assert f"the KL's ratio lies {-above[1]:.2f} under it and the default's {above[0]:.2f} above" in text
    pot = (RESULTS_DIR / "benchmarks" / "pot_cell_cpu.txt").read_text()
    speedup = re.search(r"speed-up of 'this checkout, same-shape layers together'.*: (\d+\.\d+)x", pot)
    assert speedup and speedup.group(1) in (NOTEBOOK / "pot-vs-msbench.md").read_text()


def _allocation_move(record: dict, start: dict) -> float:
    """Size-weighted mean |sparsity - ERK start| over the layers (the start: FCPTS's initial_sparsity)."""
    initial = {r["name"]: r["initial_sparsity"] for r in start["per_layer"]}
    rows = record["per_layer"]
    return sum(abs(r["sparsity"] - initial[r["name"]]) * r["numel"] for r in rows) / sum(r["numel"] for r in rows)


def test_allocation_move_table_is_the_records():
    lite0 = "imagenet/imagenet-val1300/efficientnet_lite0"
    cells = {  # row label -> (folder, cell, FCPTS+ profile suffix)
        "CIFAR-10 ResNet-32 90%": ("cifar/cifar10/resnet32", "sp90-paper-cpu", ""),
        "Lite0 70%, FCPTS+ with `ramp=0.25`": (lite0, "sp70-cpu", "-ramp0.25"),
        "Lite0 70%, FCPTS+ without ramp": (lite0, "sp70-cpu", ""),
    }
    text = (NOTEBOOK / "beyond-the-paper.md").read_text()
    for label, (folder, cell, plus_suffix) in cells.items():
        fcpts = _record(f"{folder}/fcpts-{cell}-seed0.json")
        plus = _record(f"{folder}/fcpts-plus-{cell}{plus_suffix}-seed0.json")
        rows = [r for r in _table_rows(text, label) if len(r) == 3]  # this table's rows: label and two moves
        assert len(rows) == 1, label
        assert rows[0][1:3] == [f"{_allocation_move(fcpts, fcpts):.4f}", f"{_allocation_move(plus, fcpts):.4f}"]


def test_heldout_choice_tables_are_the_committed_outputs_rows():
    """docs/notebook/heldout-choices.md's tables: each row a line of the held-out choice outputs it cites."""
    names = ("heldout_fcpts_plus_cpu_80.md", "heldout_fcpts_plus_cpu_90.md", "heldout_fcpts_plus_ramp_paper.md")
    lines = {line for n in names for line in (RESULTS_DIR / "benchmarks" / n).read_text().splitlines()}
    rows = [line for line in (NOTEBOOK / "heldout-choices.md").read_text().splitlines() if line.startswith("| 0.")]
    assert len(rows) == 12 and not [row for row in rows if row not in lines]


def test_lite0_heldout_table_is_its_rows():
    """Each row of the held-out Lite0 table in docs/notebook/beyond-the-paper.md: its method, options, calibration
    crop and target's line of results/ablations/lite0-heldout.jsonl (FCPTS's from the earlier
    lite0-lr-heldout.jsonl)."""
    ablations = RESULTS_DIR / "ablations"
    rows = [json.loads(line) for line in (ablations / "lite0-heldout.jsonl").read_text().splitlines()]
    lr_rows = [json.loads(line) for line in (ablations / "lite0-lr-heldout.jsonl").read_text().splitlines()]
    soft = {"lr": 0.02, "ramp": 0, "erk_power": 0.5}
    plus = {  # row label -> (options, smallest crop area)
        "ramp kept, ERK exponent 0.5": ({"lr": 0.02, "erk_power": 0.5}, 0.08),
        "no ramp, ERK exponent 0.5": (soft, 0.08),
        "no ramp, ERK exponent auto": ({**soft, "erk_power": "auto"}, 0.08),
        "no ramp, ERK exponent 0.5, crop area 0.35-1": (soft, 0.35),
        "no ramp, ERK exponent 0.5, crop area 0.6-1": (soft, 0.6),
        "no ramp, ERK exponent 0.5, lr 0.01": ({**soft, "lr": 0.01}, 0.08),
        "no ramp, ERK exponent 0.5, BN re-estimated": ({**soft, "bn_recalibration": True}, 0.08),
        "no ramp, ERK exponent 0.5, block weight 4": ({**soft, "block_weight": 4}, 0.08),
        "no ramp, ERK exponent 0.5, block weight auto": ({**soft, "block_weight": "auto"}, 0.08),
    }

    def row_of(method: str, options: dict, target: float, crop: float | None) -> dict | None:
        found = [
            r
            for r in rows
            if (r["method"], r["options"], r["target"]) == (method, options, target)
            and r.get("calibration_crop_scale", 0.08) == crop  # rows before the option ran at the task's 0.08
        ]
        assert len(found) <= 1, (method, options, target, crop)
        return found[0] if found else None

    expected = {  # row label -> the JSON line it shows
        "FCPTS, lr 0.02, 70%": next(r for r in lr_rows if r["lr"] == 0.02 and r["target"] == 0.7),
        "POT L2Norm, 1,000 iterations per layer, 50%": row_of("pot-l2norm", {"iterations": 1000}, 0.5, None),
    }
    for name, (options, crop) in plus.items():
        for t in (0.5, 0.7):
            if row := row_of("fcpts-plus", options, t, crop):
                expected[f"FCPTS+, {name}, {t:.0%}"] = row
    text = (NOTEBOOK / "beyond-the-paper.md").read_text()
    shown = [r[0] for r in _table_rows(text, "FCPTS") + _table_rows(text, "POT L2Norm,") if len(r) == 3]
    assert sorted(shown) == sorted(expected), "the table shows exactly the rows that ran"
    for label, row in expected.items():
        cells = _table_rows(text, label)
        assert len(cells) == 1, label
        assert cells[0][1:] == [f"{row['tuning_top1']:.2f}", f"{row['agreement_with_dense']:.2f}"], label


def test_lite0_obs_cell_made_again_is_the_record():
    """The Lite0 50% OBS cell made again with the chunked sums: its minutes as docs/notebook/beyond-the-paper.md
    quotes them."""
    obs = _record("imagenet/imagenet-val1300/efficientnet_lite0/obs-sp50-cpu-seed0.json")
    prose = " ".join((NOTEBOOK / "beyond-the-paper.md").read_text().split())
    assert (
        f"The 50% cell was made again with the chunked sums (docs/notebook/reruns.md): "
        f"{obs['wall_s'] / 60:.0f} minutes" in prose
    )


TABLE2_CELLS = [(d, m, s) for d in ("cifar10", "cifar100") for m in ("resnet32", "resnet56") for s in (70, 80, 90)]


def test_obs_against_fcpts_on_table2_is_the_records():
    """beyond-the-paper.md's gaps between FCPTS and OBS on the Table 2 cells (seed 0, the records Table 2 shows), and
    that OBS is above both POTs on every 70% cell."""
    gaps: dict[tuple[str, int], list[float]] = {}
    for dataset, model, sparsity in TABLE2_CELLS:
        folder = f"cifar/{dataset}/{model}"
        fcpts_profile = "paper" if (dataset, model, sparsity) == ("cifar10", "resnet56", 90) else "paper-cpu"
        top1 = {
            m: _record(f"{folder}/{m}-sp{sparsity}-{fcpts_profile if m == 'fcpts' else 'paper-cpu'}-seed0.json")[
                "metrics"
            ]["top1"]
            for m in ("fcpts", "obs", "pot-l2norm", "pot-erk")
        }
        gaps.setdefault((dataset, sparsity), []).append(top1["fcpts"] - top1["obs"])
        assert sparsity != 70 or top1["obs"] > max(top1["pot-l2norm"], top1["pot-erk"]), (folder, sparsity)
    text = " ".join((NOTEBOOK / "beyond-the-paper.md").read_text().split())
    assert f"by {gaps['cifar10', 70][0]:.2f} and {gaps['cifar10', 70][1]:.2f} points on CIFAR-10" in text
    assert f"{gaps['cifar100', 70][0]:.2f} and {gaps['cifar100', 70][1]:.2f} on CIFAR-100" in text
    for dataset, sparsity in (("cifar10", 80), ("cifar10", 90), ("cifar100", 80), ("cifar100", 90)):
        low, high = sorted(gaps[dataset, sparsity])
        assert f"{low:.2f}-{high:.2f}" in text, (dataset, sparsity)


RAMP_70_AT = "a4938de"  # the last commit whose FCPTS+ 70% CIFAR records all ran with the ramp


def _ramp_record(folder: str, sparsity: int) -> dict:
    """FCPTS+ with the ramp and the automatic block weight on a cell: its `paper-cpu` record while that ran with the
    ramp (the default until the ramp became "auto"), else the `--option block_weight=auto` record, the same run; at
    70%, where no such record ran, the `paper-cpu` record as the last commit before it was made again held it."""
    relative = f"{folder}/fcpts-plus-sp{sparsity}-paper-cpu-seed0.json"
    if effective_options(default := _record(relative))["ramp"] == 0.5:
        return default
    if (RUNS / (auto := relative.replace("-paper-cpu-", "-paper-cpu-block_weightauto-"))).exists():
        return _record(auto)
    ramped = record_at(RAMP_70_AT, relative)
    assert sparsity == 70 and effective_options(ramped)["ramp"] == 0.5, relative
    return ramped


@pytest.mark.parametrize(("dataset", "model", "sparsity"), TABLE2_CELLS)
def test_table2_fcpts_plus_table_is_the_records(dataset, model, sparsity):
    """The Table 2 table of docs/notebook/beyond-the-paper.md: FCPTS's top-1 (the record Table 2 shows), FCPTS+'s
    (today's default record), their difference, FCPTS+'s with the ramp (the same record at 90%), and at block
    weight 8 where it ran."""
    label = f"{dataset.replace('cifar', 'CIFAR-')} {model.replace('resnet', 'ResNet-')} {sparsity}%"
    rows = [r for r in _table_rows((NOTEBOOK / "beyond-the-paper.md").read_text(), label) if r[0] == label]
    assert len(rows) == 1, label
    folder = f"cifar/{dataset}/{model}"
    fcpts_profile = "paper" if (dataset, model, sparsity) == ("cifar10", "resnet56", 90) else "paper-cpu"
    fcpts = _record(f"{folder}/fcpts-sp{sparsity}-{fcpts_profile}-seed0.json")["metrics"]["top1"]
    plus = _record(f"{folder}/fcpts-plus-sp{sparsity}-paper-cpu-seed0.json")
    assert not earlier_defaults(plus), label
    top1 = plus["metrics"]["top1"]
    assert rows[0][1:4] == [f"{fcpts:.2f}", f"{top1:.2f}", f"{top1 - fcpts:+.2f}"], label
    ramp = _ramp_record(folder, sparsity)
    assert rows[0][4] == ("same" if ramp is plus or ramp == plus else f"{ramp['metrics']['top1']:.2f}"), label
    path = RUNS / f"{folder}/fcpts-plus-sp{sparsity}-paper-cpu-block_weight8-seed0.json"  # --option block_weight=8
    assert rows[0][7] == (f"{json.loads(path.read_text())['metrics']['top1']:.2f}" if path.exists() else "—"), label


def test_fcpts_plus_time_against_fcpts_is_the_records():
    """beyond-the-paper.md's range of FCPTS+'s wall time over FCPTS's on the 70% and 80% Table 2 cells (seed 0, the
    records Table 6 shows), which ran on one processor; the 90% ones ran on another."""
    ratios, devices = [], set()
    for dataset, model, sparsity in TABLE2_CELLS:
        folder = f"cifar/{dataset}/{model}"
        fcpts_profile = "paper" if (dataset, model, sparsity) == ("cifar10", "resnet56", 90) else "paper-cpu"
        fcpts = _record(f"{folder}/fcpts-sp{sparsity}-{fcpts_profile}-seed0.json")
        plus = _record(f"{folder}/fcpts-plus-sp{sparsity}-paper-cpu-seed0.json")
        processors = {r["device"].split(",")[0] for r in (fcpts, plus)}
        if sparsity < 90:
            assert processors == {"cpu: AMD EPYC"}, (folder, sparsity)
            ratios.append(plus["wall_s"] / fcpts["wall_s"])
        else:
            devices |= processors
    assert len(devices) == 2
    text = " ".join((NOTEBOOK / "beyond-the-paper.md").read_text().split())
    assert f"still took {min(ratios):.1f}-{max(ratios):.1f}x FCPTS's wall time" in text


def test_the_default_reproduced_the_records_made_with_the_auto_option_bit_for_bit():
    """The `paper-cpu-block_weightauto` records (`--option block_weight=auto`, before it was the default) and the
    `paper-cpu` ones made later under the default: the same masks and metrics on every such cell."""
    autos = sorted(RUNS.glob("cifar/*/*/fcpts-plus-sp*-paper-cpu-block_weightauto-seed0.json"))
    assert len(autos) == 8, "the eight 80%/90% Table 2 cells"
    pairs = [
        (path, json.loads(path.with_name(path.name.replace("-block_weightauto", "")).read_text())) for path in autos
    ]
    pairs = [(path, default) for path, default in pairs if default["method_options"]["ramp"] == 0.5]  # not made again
    assert len(pairs) >= 4, "the four 90% cells, whose default keeps the ramp"
    for path, default in pairs:
        auto = json.loads(path.read_text())
        assert default["method_options"]["block_weight"] == "auto" and default["git_commit"] != auto["git_commit"]
        assert (default["mask_sha256"], default["metrics"]) == (auto["mask_sha256"], auto["metrics"]), path.name


@pytest.mark.parametrize(
    ("dataset", "methods"),
    [("cifar10", ("fcpts-plus", "fcpts")), ("cifar100", ("fcpts-plus", "fcpts"))],
)
def test_table2_three_seed_means_in_the_doc_are_the_records(dataset, methods):
    """Seeds 0-2 on ResNet-32 at 90%, as docs/notebook/beyond-the-paper.md quotes them."""
    text = " ".join((NOTEBOOK / "beyond-the-paper.md").read_text().split())
    for method in methods:
        top1 = [
            _record(f"cifar/{dataset}/resnet32/{method}-sp90-paper-cpu-seed{s}.json")["metrics"]["top1"]
            for s in (0, 1, 2)
        ]
        quoted = f"{statistics.mean(top1):.2f} ± {statistics.stdev(top1):.2f}"
        assert quoted in text, (method, quoted)


def test_lite0_50_percent_seed_means_in_the_doc_are_the_records():
    """FCPTS+ and POT L2Norm over seeds 0-2 on the Lite0 stand-in at 50%, as docs/notebook/beyond-the-paper.md
    quotes them."""
    text = " ".join((NOTEBOOK / "beyond-the-paper.md").read_text().split())  # line breaks as spaces
    for method in ("fcpts-plus", "pot-l2norm"):
        top1 = [
            _record(f"imagenet/imagenet-val1300/efficientnet_lite0/{method}-sp50-cpu-seed{s}.json")["metrics"]["top1"]
            for s in (0, 1, 2)
        ]
        assert f"{statistics.mean(top1):.2f} ± {statistics.stdev(top1):.2f}" in text, (method, top1)
        if method == "fcpts-plus":
            assert f"seeds 0-2 ({', '.join(f'{t:.2f}' for t in top1)})" in text, top1


def test_block_weight_ranges_quoted_are_the_benchmarks():
    """The ranges of the automatic block weight that beyond-the-paper.md quotes (70% and 80%, without the ramp), and
    of the two gradients' ratio at weight 1, from results/benchmarks/block_balance_cpu.txt."""
    text = (RESULTS_DIR / "benchmarks" / "block_balance_cpu.txt").read_text()
    weights = {row[0]: float(row[5]) for row in _table_rows(text, "cifar") if len(row) == 7}
    notebook = " ".join((NOTEBOOK / "beyond-the-paper.md").read_text().split())
    ratios = {row[0]: float(row[4]) / float(row[3]) for row in _table_rows(text, "") if len(row) == 7 and "%" in row[0]}
    for prefix, digits, after in (("cifar10 ", 2, "of the KL"), ("cifar100", 1, "times it"), ("image", 0, "times it")):
        mine = [r for cell, r in ratios.items() if cell.startswith(prefix)]  # the blocks' gradient over the KL's
        assert f"{min(mine):.{digits}f}-{max(mine):.{digits}f} {after}" in notebook, prefix
    for dataset, name in (("cifar10 ", "CIFAR-10"), ("cifar100", "CIFAR-100")):
        low = [w for cell, w in weights.items() if cell.startswith(dataset) and not cell.endswith("90%")]
        digits = 1 if dataset == "cifar10 " else 2
        assert f"{min(low):.{digits}f}-{max(low):.{digits}f} on {name}" in notebook


def test_block_balance_benchmark_chose_what_the_full_runs_chose():
    """results/benchmarks/block_balance_cpu.txt probes each cell for two iterations; the weight it prints is the one
    the cell's full run with the auto weight chose (the record's report), on every such record."""
    text = (RESULTS_DIR / "benchmarks" / "block_balance_cpu.txt").read_text()
    printed = {row[0]: row[5] for row in _table_rows(text, "cifar") if len(row) == 7}
    records = [read_record(p) for p in sorted(RUNS.glob("cifar/*/*/fcpts-plus-sp*-paper-cpu-*seed0.json"))]
    records = [r for r in records if "block_weight" in r["method_report"]["extra"] and not earlier_defaults(r)]
    assert len(records) >= 8, "the 90% Table 2 cells, by default and with --option block_weight=auto, and any remade"
    for record in records:
        cell = f"{record['dataset']} {record['model']} {record['target_sparsity']:.0%}"
        assert printed[cell] == f"{record['method_report']['extra']['block_weight']['chosen']:.4f}", cell


@pytest.mark.parametrize("model, label", [("resnet18", "ResNet-18"), ("resnet50", "ResNet-50"), ("vit_base", "ViT-B")])
def test_pot_choice_counts_quoted_are_the_benchmark_outputs(model, label):
    """How many layers (and timed layers) choose otherwise at the paper's size, as benchmarks.scale.pot_choices
    wrote it."""
    text = (RESULTS_DIR / "benchmarks" / f"pot_choices_{model}.txt").read_text()
    differ, total, names = re.search(r"differ from a probe's: (\d+) of (\d+)(?:: (.*))?$", text, re.M).groups()
    timed = names.count("(timed)")
    timed_total = sum(line.startswith("*") for line in text.splitlines())
    doc = (NOTEBOOK / "benchmarks.md").read_text()
    quoted = "all 4 timed" if timed == timed_total == 4 else f"{timed} of {timed_total} timed"
    assert "+dirty" not in text
    assert re.search(rf"On {re.escape(label)} {differ} of {total}( layers)? \({quoted}\)", " ".join(doc.split()))


def test_pot_gram_gradient_section_quotes_its_outputs():
    """The CPU step times of the Gram gradient written down and by autograd, from clean commits; the load the
    notebook reports beside the ResNet-18 run."""
    doc = " ".join((NOTEBOOK / "benchmarks.md").read_text().split())
    for name in ("pot_step_time_cpu.txt", "pot_step_time_resnet18_224_cpu.txt"):
        text = (RESULTS_DIR / "benchmarks" / name).read_text()
        assert "+dirty" not in text and "OMP_NUM_THREADS=1" in text, name
        ms = re.findall(r"^pot step, (?:closed-form|autograd), eager\s*:\s+(\d+\.\d+) ms", text, re.M)
        ratio = re.search(r"closed-form gradient over autograd's, eager: (\d+\.\d+)x", text).group(1)
        assert len(ms) == 2 and float(ms[0]) < float(ms[1]), name  # the closed form is the faster
        assert f"{ms[0]} ms against autograd's {ms[1]} ms, {ratio}x" in doc, name
    r18 = (RESULTS_DIR / "benchmarks" / "pot_step_time_resnet18_224_cpu.txt").read_text()
    load = re.search(r"load average at the end (\d+\.\d+)", r18).group(1)
    assert "layers layer4.*" in r18 and f"load average {load} at its end" in doc
    cell = (RESULTS_DIR / "benchmarks" / "pot_cell_cpu_gram_gradient.txt").read_text()
    load = float(re.search(r"load average at the end (\d+\.\d+)", cell).group(1))
    errors = set(re.findall(r"^this checkout.*\s(\d\.\d{5})$", cell, re.M))
    assert load < 1.5 and "on a quiet machine" in doc  # the cell's variants ran alone
    assert len(errors) == 1 and "The same layer errors to five digits" in doc
    older = (RESULTS_DIR / "benchmarks" / "pot_cell_cpu.txt").read_text()
    together = re.search(r"^this checkout, same-shape layers together\s+(\d+\.\d)", older, re.M).group(1)
    assert f"gave {together} s for the layers together" in doc and "cpu:" not in older  # it names no processor


def test_results_doc_quotes_the_pot_objective_output():
    """results.md's sentences on POT's objectives read their ratios off the committed output, which bears them out."""
    out = (RESULTS_DIR / "benchmarks" / "pot_objective.txt").read_text().splitlines()
    doc = (NOTEBOOK / "results.md").read_text()
    # per shape: forward, per-image set-up + steps, per-batch set-up + steps, closed-form steps, ratios, estimates
    rows = {line[:32].strip(): line[32:].split() for line in out[4:]}
    text = " ".join(doc.split())
    ratio = {name: float(row[8]) for name, row in rows.items()}
    assert (
        f"{ratio['lite0 1x1 16->96 @112']:.0f}x for Lite0's 1x1 16->96 at 112x112, "
        f"{ratio['lite0 1x1 672->112 @14']:.1f}x for its 1x1 672->112 at 14x14, "
        f"{ratio['lite0 depthwise 3x3 144 @56']:.1f}x for its depthwise 3x3 at 56x56, "
        f"{ratio['cifar-resnet 3x3 64->64 @8']:.1f}x for a CIFAR 3x3 64->64 conv at 8x8, "
        f"{ratio['cifar-resnet 3x3 16->16 @32']:.1f}x for 16->16 at 32x32: the statistics win on every shape here, "
        "and the estimates rank them so" in text
    )
    assert all(r > 1 and float(row[9]) > 1 for r, row in zip(ratio.values(), rows.values()))
    assert all(float(row[7]) <= float(row[6]) for row in rows.values())  # closed form no longer than autograd's
    wide = rows["lite0 1x1 672->112 @14"]
    assert f"no longer on any shape, {wide[7]} s against autograd's {wide[6]} s on the 672->112 conv" in text


def test_obs_design_findings_are_the_records_beside_them():
    """Every top-1 the obs-design note quotes is one of the records in its folder (to the digits quoted)."""
    folder = RESULTS_DIR / "investigations" / "obs-design"
    top1s = [json.loads(p.read_text())["metrics"]["top1"] for p in folder.glob("*.json")]
    quoted = re.findall(r"(?<![\w.])\d\d\.\d\d?(?![\w.]*\d)", (folder / "README.md").read_text())
    assert quoted, "the note quotes no top-1"
    missing = [q for q in quoted if not any(f"{t:.{len(q.split('.')[1])}f}" == q for t in top1s)]
    assert not missing, f"obs-design/README.md quotes top-1s no record beside it holds: {missing}"
