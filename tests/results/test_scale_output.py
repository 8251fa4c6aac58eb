"""The committed scale benchmark output and the numbers docs/notebook/benchmarks.md quotes from it: every paper
model with every method it measured, its Markdown table regenerated from its JSON, the grid's hours as the doc
states them."""

import copy
import json

import pytest

from baselines.score_projection import PROJECTION_BISECTIONS
from benchmarks.scale import scale
from benchmarks.scale.scale import project_layerwise
from tasks.grid.paths import REPO_ROOT
from tests.results.git_history import json_at

OUTPUT = REPO_ROOT / "results" / "benchmarks" / "scale_cpu_small.json"


def small_before_paper_choices(sizes: dict) -> bool:
    """Today's --small probe sizes, made before the layer-wise probes chose as at the paper's size: the ViT-L
    ProbMask outputs of the Intel Xeon (ProbMask makes no such choice)."""
    return sizes == {k: v for k, v in scale.SMALL.items() if k != "paper_choices"} and scale.SMALL["paper_choices"]


def notebook_text() -> str:
    """docs/notebook/benchmarks.md with its line breaks and runs of spaces as single spaces."""
    return " ".join((REPO_ROOT / "docs" / "notebook" / "benchmarks.md").read_text().split())


def cell_of(run: dict, model: str, method: str) -> dict:
    return next(c for c in run["cells"] if (c["model"], c["method"]) == (model, method))


@pytest.fixture(scope="module")
def result():
    return json.loads(OUTPUT.read_text())


@pytest.fixture(scope="module")
def table_before():
    """The table measured at 2020f95, before ProbMask's projection was binned and the loop let gradients go first."""
    return json_at("2020f95", "results/benchmarks/scale_cpu_small.json")


def test_every_paper_model_and_method_has_a_row_measured_or_said_not_to_be(result, table_before):
    cells = {(c["model"], c["method"]): c for c in result["cells"]}
    assert set(cells) == {(m, meth) for m in scale.PAPER_MODELS for meth in result["budgets"]}
    assert {c["status"] for c in cells.values()} <= {"ok", "not measured", "crashed", "timeout", "error"}
    assert {m for (m, _), c in cells.items() if c["status"] == "ok"} == set(scale.PAPER_MODELS)
    assert (
        result["mode"] == "small" and result["sizes"] == scale.SMALL
    )  # the layer-wise cells chose as at the paper's size
    assert all(c["status"] == "ok" for c in cells.values()) and "capped at 21 GiB" in result["note"]
    text = notebook_text()
    assert "All 91 cells (7 models x 13 methods) finished." in text and len(cells) == 91
    crashed = cell_of(table_before, "vit_large", "probmask")
    assert crashed["status"] == "crashed" and crashed["error"].startswith("exit -9")
    assert f"was killed by the kernel at the cap after {crashed['cell_s']:.0f} s" in text


def test_the_notebook_says_how_much_scaling_a_probes_whole_time_overstated_its_layer_wise_cells(result):
    """Each layer-wise cell whose probes split their time, projected as before (all its time scaled with the layers)
    against as now: the range and the largest, as the notebook quotes them."""
    ratios = []
    for cell in result["cells"]:
        if cell.get("kind") != "layer-wise" or cell["status"] != "ok" or cell["method"] == "magnitude-bn":
            continue
        assert all("layers_s" in p for p in cell["probes"]) and cell["projection"]["passes"] == "once"
        whole = copy.deepcopy(cell)
        for probe in whole["probes"]:
            del probe["layers_s"]
        before = project_layerwise(whole, scale.paper_budget(cell["method"]))["projected_s"] / 60
        now = cell["projection"]["projected_s"] / 60
        ratios.append((before / now, cell["model"], cell["method"], before, now))
    ratios.sort()
    assert len(ratios) == 21  # POT-L2Norm, POT-ERK and obs on every model
    text = notebook_text()
    low, high = ratios[0], ratios[-1]
    assert f"{low[0]:.2f} to {high[0]:.2f} times what the split projects" in text
    assert (high[1], high[2]) == ("regnetx_400mf", "pot-l2norm")
    assert f"(RegNetX-400MF's POT-L2Norm: {high[3]:,.0f} minutes against {high[4]:,.0f})" in text
    resnet18_pot = sorted(r[4] / r[3] for r in ratios if r[1] == "resnet18" and r[2].startswith("pot"))
    assert f"ResNet-18's POT cells come out at {resnet18_pot[0]:.2f} to {resnet18_pot[-1]:.2f}" in text


def test_projections_and_table_are_regenerated_from_the_probes(result):
    again = scale.finish(copy.deepcopy(result), result["sizes"])
    assert [c.get("projection") for c in again["cells"]] == [c.get("projection") for c in result["cells"]]
    assert again["grid"] == result["grid"]
    assert scale.markdown(result) == OUTPUT.with_suffix(".md").read_text()


def test_benchmarks_doc_quotes_the_grid_hours(result):
    text = notebook_text()
    grid = result["grid"]
    assert f"{grid['total_hours']:,.0f} core-hours" in text
    for table, row in grid["tables"].items():
        assert f"{scale.GRID_TABLES[table]}: {row['hours']:,.0f}" in text


def test_the_capped_vit_large_probmask_try_is_as_the_doc_says():
    capped = json.loads((OUTPUT.parent / "scale_cpu_small_vit_large_probmask_capped.json").read_text())
    (cell,) = capped["cells"]
    assert (cell["model"], cell["method"], cell["status"]) == ("vit_large", "probmask", "crashed")
    assert cell["error"].startswith("exit -9") and "capped at 18 GB by a cgroup" in capped["note"]
    assert (
        small_before_paper_choices(capped["sizes"])
        and scale.markdown(capped) == (OUTPUT.parent / "scale_cpu_small_vit_large_probmask_capped.md").read_text()
    )
    text = notebook_text()
    assert f"killed at the cap after {cell['cell_s']:.0f} s" in text and "capped at 18 GB" in text


def test_the_vit_large_probmask_cell_with_the_mmap_threshold_fixed_is_as_the_doc_says(table_before):
    path = OUTPUT.parent / "scale_cpu_small_vit_large_probmask_mmap.json"
    run = json.loads(path.read_text())
    (cell,) = run["cells"]
    assert (cell["model"], cell["method"], cell["status"]) == ("vit_large", "probmask", "ok")
    assert "MALLOC_MMAP_THRESHOLD_=1048576" in run["note"] and "capped at 16 GB by a cgroup" in run["note"]
    assert small_before_paper_choices(run["sizes"]) and scale.markdown(run) == path.with_suffix(".md").read_text()
    (probe,) = cell["probes"]
    fcpts = cell_of(table_before, "vit_large", "fcpts")
    text = notebook_text()
    steps = " and ".join(f"{s:.0f}" for s in probe["step_s"])
    fcpts_steps = " and ".join(f"{s:.1f}" for s in fcpts["probes"][0]["step_s"])
    for quoted in (
        f"peak {probe['peak_rss_gb']:.2f} GB resident, {cell['cell_s']:,.0f} s in all",
        f"two steps at batch 1 took {steps} s, against FCPTS's {fcpts_steps} s on ViT-L in the table at 2020f95",
        f"{PROJECTION_BISECTIONS} bisection passes over all {cell['params_total'] / 1e6:.0f} million of them",
    ):
        assert quoted in text, quoted


def test_the_vit_large_fcpts_steps_with_64_mb_flat_runs_are_as_the_doc_says(table_before):
    path = OUTPUT.parent / "scale_cpu_small_vit_large_64mb_runs.json"
    run = json.loads(path.read_text())
    assert run["git_commit"].startswith("ba91467") and "2^24 weights (64 MB)" in run["note"]
    assert scale.markdown(run) == path.with_suffix(".md").read_text()
    fcpts = cell_of(run, "vit_large", "fcpts")
    text = notebook_text()
    steps = " and ".join(f"{s:.1f}" for s in fcpts["probes"][0]["step_s"])
    assert f"FCPTS's two ViT-L steps at batch 1 took {steps} s with 64-MB runs" in text
    now = cell_of(table_before, "vit_large", "fcpts")
    assert now["git_commit"].startswith("89ba997")  # runs of 2^22
    now_steps = " and ".join(f"{s:.1f}" for s in now["probes"][0]["step_s"])
    assert f"), {now_steps} s with 16-MB runs (the scale table at 2020f95)" in text
    peaks = [c["probes"][0]["peak_rss_gb"] for c in (now, fcpts)]
    assert f"FCPTS probe peaked at {peaks[0]:.2f} GB, against {peaks[1]:.2f} GB with 64-MB runs" in text


def test_the_probmask_section_quotes_both_tables(result, table_before):
    """ProbMask's steps and peaks before (the table at 2020f95) and after its projection was binned, its noise drawn
    again and the loop's gradients let go before the forward; the ViT-L cell finished, measured at that code."""
    before, text = table_before, notebook_text()

    def steps(run, model, method):
        return " and ".join(f"{s:.1f}" for s in cell_of(run, model, method)["probes"][0]["step_s"])

    for model, name in (("resnet18", "ResNet-18"), ("vit_base", "ViT-B")):
        quoted = f"{name}: {steps(before, model, 'probmask')} s against "
        assert quoted + ("FCPTS's " if model == "resnet18" else "") + steps(before, model, "fcpts") in text
    vit_b, vit_l = cell_of(result, "vit_base", "probmask"), cell_of(result, "vit_large", "probmask")
    old_vit_b = cell_of(before, "vit_base", "probmask")
    assert f"ProbMask's ViT-B steps took {steps(result, 'vit_base', 'probmask')} s" in text
    assert (
        f"(peak {vit_b['peak_rss_process_gb']:.2f} GB resident, against {old_vit_b['peak_rss_process_gb']:.2f})" in text
    )
    assert f"ResNet-18's {steps(result, 'resnet18', 'probmask')} s;" in text
    assert vit_l["status"] == "ok" and vit_l["git_commit"] == vit_b["git_commit"]
    assert (
        f"peak {vit_l['peak_rss_process_gb']:.2f} GB resident, steps of {steps(result, 'vit_large', 'probmask')} s, "
        f"{vit_l['cell_s']:,.0f} s in all" in text
    )
    for model, method, label in (("vit_base", "fcpts", "ViT-B FCPTS"), ("vit_large", "str", "ViT-L STR")):
        was, now = (cell_of(run, model, method)["peak_rss_process_gb"] for run in (before, result))
        assert now < was and f"{label} {was:.2f} to {now:.2f} GB" in text
