"""A method beyond the paper (`obs`) gets labelled rows in Tables 2, 3, 6 and a labelled line in Figure 1 once a
record of it exists, with no paper number beside it; without its records every table is the paper's as before.
And the reporting command lists all its commands when it is given none it knows."""

import subprocess
import sys

import pytest

from fcpts.methods import label
from tasks.grid.paths import REPO_ROOT
from tasks.reporting import figures
from tasks.reporting.paper import read_reference, table2, table6
from tasks.reporting.tables_imagenet import table1, table3, table4
from tests.fake_records import cifar_record as cifar

OBS_ROW = f"{label('obs')} (not in the paper)"


@pytest.fixture(scope="module")
def reference():
    return read_reference()


def lite0(method, sp=0.7, top1=60.0):
    return {
        "task": "imagenet",
        "dataset": "imagenet-val1300",
        "model": "efficientnet_lite0",
        "method": method,
        "target_sparsity": sp,
        "hit_target": True,
        "profile": {"name": "cpu"},
        "metrics": {"top1": top1, "top5": 80.0},
        "dense_metrics": {"top1": 75.0, "top5": 92.0},
        "data": {"n_eval": 1300},
    }


PAPER_CELLS = [
    cifar("fcpts", profile="paper"),
    cifar("pot-l2norm", top1=40.0, profile="paper", wall_s=1800.0),
]
OBS = cifar("obs", top1=79.1, profile="fast", wall_s=120.0)  # its own profile: its legend line is its own


def only_obs_rows_added(plain: str, text: str) -> bool:
    """The table rows of `text` are those of `plain`, in order, with OBS rows in between."""
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return [r for r in rows if OBS_ROW not in r] == [line for line in plain.splitlines() if line.startswith("| ")]


def test_table2_gains_a_labelled_obs_row_without_a_paper_number(reference, tmp_path):
    plain, plain_rows = table2(PAPER_CELLS, reference, tmp_path)
    with_obs, rows = table2([*PAPER_CELLS, OBS], reference, tmp_path)
    assert "not in the paper" not in plain and [r["method"] for r in plain_rows] == ["pot-l2norm", "fcpts"]
    row = next(line for line in with_obs.splitlines() if line.startswith(f"| resnet32 | {OBS_ROW} |"))
    assert "**79.10/99.00** (−13.50) [fast] · —" in row  # the paper has no number: "—" after "·"
    assert row.count("no record · —") == 5
    assert f"| resnet56 | {OBS_ROW} | " + " | ".join(["no record · —"] * 6) + " |" in with_obs
    assert "- `(not in the paper)`: a method beyond the paper's" in with_obs  # the legend explains the marker
    obs_rows = [r for r in rows if r["method"] == "obs"]
    assert len(obs_rows) == 1 and obs_rows[0]["paper_top1"] == obs_rows[0]["paper_top5"] == ""
    assert obs_rows[0]["top1"] == 79.1
    assert only_obs_rows_added(plain, with_obs)


def test_table2_ignores_obs_records_outside_its_cells(reference, tmp_path):
    plain, _ = table2(PAPER_CELLS, reference, tmp_path)
    elsewhere = [
        cifar("obs", sp=0.5),
        cifar("obs", model="resnet20"),
        cifar("obs", profile="paper-cpu-it10"),
    ]
    assert table2([*PAPER_CELLS, *elsewhere], reference, tmp_path)[0] == plain


def test_table6_gains_an_obs_time_column_left_out_of_the_ratio(reference):
    other = [dict(r, target_sparsity=0.8) for r in PAPER_CELLS]
    obs = dict(OBS, profile={"name": "paper"})
    plain = table6([*PAPER_CELLS, *other], reference)
    text = table6([*PAPER_CELLS, *other, obs], reference)
    assert "not in the paper" not in plain
    header = next(line for line in text.splitlines() if line.startswith("| dataset"))
    assert f"| FCPTS min | {OBS_ROW} min | FCPTS / POT |" in header
    assert "| cifar10 | resnet32 | 90% | paper | 30.0 | — | 10.0 | 2.0 | 0.33 | forward | cpu: test |" in text
    assert "| cifar10 | resnet32 | 80% | paper | 30.0 | — | 10.0 | — | 0.33 | forward | cpu: test |" in text
    assert "its column is left out of the FCPTS / POT ratio" in text
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")]
    without_obs = [" | ".join(cells[:7] + cells[8:]) for cells in rows]  # the paper's columns as they were
    assert without_obs == [line for line in plain.splitlines() if line.startswith("| ")]


def test_table3_gains_labelled_obs_rows_without_a_paper_number(reference):
    base = [lite0(m) for m in ("pot-l2norm", "pot-erk", "probmask", "fcpts")]
    full = dict(lite0("obs", top1=55.0), dataset="imagenet", model="resnet18")
    plain = table3(base, reference)
    text = table3([*base, lite0("obs", top1=58.0)], reference)
    assert "not in the paper" not in plain
    sub = next(line for line in text.splitlines() if "substitute" in line and OBS_ROW in line)
    assert "**58.00/80.00** (−17.00) [cpu]" in sub and "·" not in sub
    assert "- `(not in the paper)`: a method beyond the paper's" in text
    assert only_obs_rows_added(plain, text)
    assert OBS_ROW not in text.split("substitute")[0]  # no rows for the paper's models: no record of theirs
    r18 = next(line for line in table3([*base, full], reference).splitlines() if line.startswith(f"|  | {OBS_ROW} |"))
    assert "**55.00/80.00** (−20.00) [cpu] |" in r18 and "·" not in r18  # a paper model's row, no paper number
    assert OBS_ROW not in table1([*base, full], reference)  # Table 1 is the paper's POT vs learned masks
    assert OBS_ROW not in table4([lite0("obs")], reference)  # no substitute rows for ViTs


def test_tables_take_their_models_and_sparsities_from_the_paper_s_reference(reference, tmp_path):
    """A model or sparsity the reference lists for a table is a row or column of it, with no edit to the code."""
    more = [
        dict(
            next(r for r in reference if r["table"] == table and r["method"] != "dense"),
            model=model,
            sparsity=sp,
            top1="50.0",
            top5="70.0",
        )
        for table, model, sp in (("table2", "resnet110", "0.95"), ("table3", "resnet152", "0.95"))
    ]
    text2, _ = table2(PAPER_CELLS, [*reference, *more], tmp_path)
    assert "| resnet110 | dense |" in text2 and "cifar10 95%" in text2.splitlines()[4]
    assert "| resnet110 | dense |" not in table2(PAPER_CELLS, reference, tmp_path)[0]
    text3 = table3([], [*reference, *more])
    assert "| resnet152 | " in text3 and "| 95% |" in text3 and "| 95% |" not in table3([], reference)


def test_figure1_draws_obs_as_a_labelled_line(monkeypatch, tmp_path):
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, out, *_: drawn.append(fig) or out)
    records = [cifar(m, sp=sp) for m in ("fcpts", "obs") for sp in (0.7, 0.9)]
    figures.figure1(records, tmp_path / "f1.png")
    legend = [t.get_text() for t in drawn[0].legends[0].get_texts()]
    assert legend == [label("fcpts"), OBS_ROW, "dense"]
    figures.figure1(records[:2], tmp_path / "f1.png")
    assert [t.get_text() for t in drawn[1].legends[0].get_texts()] == [label("fcpts"), "dense"]


def test_figure1_has_one_legend_for_all_panels_with_every_line_once(monkeypatch, tmp_path):
    """Panels do not repeat the legend (it covered their data); lines a later panel adds still get an entry,
    in the methods' order, and a long title wraps instead of running off the figure."""
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, out, *_: drawn.append(fig) or out)
    records = [cifar(m, sp=sp) for m in ("fcpts", "obs") for sp in (0.7, 0.9)]
    for sp in (0.7, 0.9):
        r = cifar("pot-l2norm", sp=sp)
        r.update(model="a_detector_with_a_long_name_from_an_mmdet_config-160", dataset="voc-cifar10")
        records.append(r)
    figures.figure1(records, tmp_path / "f1.png")
    fig = drawn[0]
    assert [ax.get_legend() for ax in fig.axes] == [None] * len(fig.axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [label("fcpts"), label("pot-l2norm"), OBS_ROW, "dense"]
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert any("\n" in t for t in titles) and all(len(line) <= 48 for t in titles for line in t.splitlines())


def test_table6_quotes_the_equal_load_ratios_of_the_extras_only_when_it_has_extras(reference):
    benchmark = "\n".join(
        [
            "model resnet32, 256 images, ... (ratio: median over rounds of the run over the fcpts run before it)",
            "fcpts       : run     42.6 s, ratio to fcpts 1.00; step    977.5 ms",
            "fcpts-plus  : run     44.0 s, ratio to fcpts 1.03; step    920.7 ms after its ramp",
            "command: python -m benchmarks.speed.method_time --device cpu",
            "commit abc",
        ]
    )
    gpu = benchmark.replace("cpu", "cuda")
    files = {"results/benchmarks/method_time_cpu.txt": benchmark, "results/benchmarks/method_time_cuda.txt": gpu}
    with_extra = table6([*PAPER_CELLS, dict(OBS, profile={"name": "paper"})], reference, files)
    blocks = with_extra.split("```")
    assert blocks[1].strip().splitlines() == benchmark.splitlines()[:3]  # header, ratios; provenance stays in the file
    assert blocks[3].strip().splitlines() == gpu.splitlines()[:3] and "method_time_cuda.txt" in blocks[2]
    assert "```" not in table6(PAPER_CELLS, reference, files)


def test_figure1_plots_a_detection_model_by_its_map(monkeypatch, tmp_path):
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, out, *_: drawn.append(fig) or out)
    records = []
    for sp, map50 in ((0.5, 17.2), (0.9, 15.1)):
        r = cifar("fcpts", sp=sp)
        r.update(task="voc", dataset="voc-cifar10", model="ssdlite")
        r["metrics"], r["dense_metrics"] = {"map50": map50}, {"map50": 18.3}
        records.append(r)
    figures.figure1(records, tmp_path / "f1.png")
    ax = drawn[0].axes[0]
    assert ax.get_ylabel() == "mAP@0.5 (%)"
    assert list(ax.get_lines()[0].get_ydata()) == [17.2, 15.1]


def test_the_gpu_checks_records_make_their_own_table6_rows(reference, tmp_path):
    """A GPU check's records (their own calibration pool and test subset) are never mixed into a `paper` row:
    their profile names the check, and they make a row only where FCPTS and a POT both ran there."""
    import json

    from tasks.reporting.paper import gpu_check_records

    folder = tmp_path / "gpu_check_h100" / "records"
    for method, wall_s in (("fcpts", 80.0), ("pot-l2norm", 60.0)):
        rec = {**cifar(method, profile="paper", wall_s=wall_s), "device": "cuda: test"}
        path = folder / rec.pop("_path")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))
    checked = gpu_check_records(tmp_path)
    assert {r["profile"]["name"] for r in checked} == {"paper (GPU check h100)"}
    text = table6([*PAPER_CELLS, *checked], reference)
    assert "| cifar10 | resnet32 | 90% | paper (GPU check h100) | 1.0 | — | 1.3 |" in text
    assert "| cifar10 | resnet32 | 90% | paper | 30.0 |" in text  # the paper row keeps its own records
    assert "A `(GPU check ...)` row is the GPU check's" in text
    fcpts_only = [r for r in checked if r["method"] == "fcpts"]
    assert "GPU check" not in table6([*PAPER_CELLS, *fcpts_only], reference)


def test_a_paper_budget_pot_pairs_with_fcpts_of_the_same_budget_under_paper_cpu(reference):
    """`paper-cpu` cuts POT's budget only: its FCPTS record ran the paper's budget, so a full-budget POT record
    gets a `paper` row with it, labelled; an FCPTS record of another budget does not."""
    pot = cifar("pot-l2norm", sp=0.8, profile="paper", wall_s=4800.0)
    fcpts = cifar("fcpts", sp=0.8, profile="paper-cpu", wall_s=600.0)
    fcpts.update(budget={"iterations": 1600, "batch_size": 64, "seed": 0, "options": None})
    fcpts.update(calibration={"n_images": 1024})
    row = "| cifar10 | resnet32 | 80% | paper (FCPTS: paper-cpu, the same budget) | 80.0 | — | 10.0 |"
    assert row in table6([pot, fcpts], reference)
    shorter = dict(fcpts, budget={**fcpts["budget"], "iterations": 400})
    assert "80% | paper" not in table6([pot, shorter], reference)


def reporting(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tasks.reporting", *argv], capture_output=True, text=True, cwd=REPO_ROOT, check=False
    )


@pytest.mark.parametrize("argv", [[], ["bogus"]])
def test_the_reporting_command_names_all_its_commands_when_given_none_or_another(argv):
    done = reporting(*argv)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "{tables,manifest,figures,site,readme}" in done.stderr
    listing = reporting("--help").stdout
    assert all(f"    {name} " in listing for name in ("tables", "manifest", "figures", "site", "readme"))


@pytest.mark.parametrize("command", ["tables", "manifest", "figures", "site", "readme"])
def test_each_reporting_command_answers_help_with_its_own_usage_and_does_nothing(command):
    before = (REPO_ROOT / "README.md").read_text()
    done = reporting(command, "--help")
    assert done.returncode == 0 and done.stdout.startswith(f"usage: python -m tasks.reporting {command} [-h]")
    assert (REPO_ROOT / "README.md").read_text() == before


def test_readme_check_changes_nothing_and_fails_on_a_stale_block(tmp_path, capsys):
    from tasks.reporting import readme

    stale = tmp_path / "README.md"
    stale.write_text(
        "<!-- BEGIN methods -->\nSTALE\n<!-- END methods -->\n<!-- BEGIN results -->\n<!-- END results -->\n"
    )
    text = stale.read_text()
    assert readme.update(stale, check=True) == 1
    assert stale.read_text() == text and "stale" in capsys.readouterr().err
    assert readme.update(stale) == 0 and readme.update(stale, check=True) == 0


def test_the_bridge_figure_without_its_checkpoint_or_record_leaves_the_committed_one(tmp_path):
    """Figure 3 needs a dense checkpoint that is not committed: without it, the committed figure is kept and the
    skip is said, never replaced by a placeholder."""
    (tmp_path / "fig3_bridge.png").write_bytes(b"committed")
    said: list[str] = []
    assert figures.figure3([], tmp_path / "fig3_bridge.png") is None
    figures.write_figures(tmp_path / "no-runs", tmp_path, skipped=said.append)
    assert (tmp_path / "fig3_bridge.png").read_bytes() == b"committed"
    assert len(said) == 1 and "fig3_bridge.png" in said[0] and "checkpoint" in said[0]


def test_the_tables_command_names_a_damaged_side_file_in_one_line(monkeypatch, tmp_path, capsys):
    from tasks.grid.record_format import write_record
    from tasks.reporting import paper

    write_record(tmp_path / "r.json", {**cifar("fcpts", 0.9, 90.0), "per_layer": [{"name": "c", "numel": 9}]})
    (detail,) = tmp_path.glob("*.detail")
    detail.write_text("")
    monkeypatch.setattr(paper, "write_tables", lambda: paper.all_records(tmp_path))
    from tasks.reporting.__main__ import parser, run

    code = run(parser().parse_args(["tables"]))
    err = capsys.readouterr().err
    assert code == 2 and detail.name in err and "--force" in err


def test_a_stray_json_with_metrics_in_the_runs_folder_is_named_in_one_line(monkeypatch, tmp_path, capsys):
    from tasks.grid.record_format import write_record
    from tasks.reporting import paper

    write_record(tmp_path / "cifar" / "r.json", cifar("fcpts", 0.9, 90.0))
    stray = tmp_path / "summary.json"
    stray.write_text('{"metrics": {"top1": 91.0}}')
    monkeypatch.setattr(paper, "write_tables", lambda: paper.all_records(tmp_path) and [])
    from tasks.reporting.__main__ import parser, run

    code = run(parser().parse_args(["tables"]))
    err = capsys.readouterr().err
    assert code == 2 and f"{stray} has 'metrics' but is no run record" in err and "move it out" in err
    stray.unlink()
    assert [r["method"] for r in paper.all_records(tmp_path)] == ["fcpts"]
