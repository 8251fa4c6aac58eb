"""The scale benchmark's pieces: how a method's kind is read from the registry, which layers are timed, what a
probe measures, and the projections from probes to the paper's budget and grid."""

import copy
import json
import os
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

import fcpts
from benchmarks.scale import scale, scale_cell
from benchmarks.scale.scale import grid_hours, line, paper_grid_cells, project_cell
from tasks.grid.paths import REPO_ROOT


def test_every_registered_method_has_a_kind_and_the_paper_budget():
    kinds = {name: scale_cell.method_kind(m) for name, m in fcpts.METHODS.items()}
    assert kinds["fcpts"] == kinds["probmask"] == kinds["str"] == "training"
    assert kinds["pot-l2norm"] == kinds["obs"] == "layer-wise"
    assert kinds["erk"] == kinds["global-magnitude"] == "one-shot"
    assert scale.paper_budget("fcpts") == {"n_calibration": 1024, "options": {}, "iterations": 1600, "batch_size": 64}
    assert scale.paper_budget("pot-l2norm")["n_calibration"] == 10240
    assert scale.paper_budget("pot-l2norm")["iterations"] == 20000


def test_spread_takes_middle_layers_not_the_ends():
    names = [f"l{i}" for i in range(10)]
    assert scale_cell.spread(names, 1) == ["l5"]
    assert scale_cell.spread(names, 2) == ["l2", "l7"]
    assert scale_cell.spread(names, 20) == names


def test_synthetic_images_are_made_per_index_and_repeat():
    images = scale_cell.SyntheticImages(3)
    assert images[1].shape == (3, 224, 224) and torch.equal(images[1], images[1])
    assert not torch.equal(images[0], images[1])
    with pytest.raises(IndexError):
        images[3]


def test_layer_costs_count_macs_of_one_image():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Flatten(), nn.Linear(8 * 224 * 224, 10))
    costs = scale_cell.layer_costs(model)
    assert costs["0"] == {"macs": 8 * 224 * 224 * 27, "params": 8 * 27}
    assert costs["2"] == {"macs": 10 * 8 * 224 * 224, "params": 10 * 8 * 224 * 224}


def test_peak_rss_sees_a_short_allocation():
    # In a fresh interpreter: a long test process's allocator may serve the block from memory already resident.
    code = (
        "import torch\n"
        "from benchmarks.scale import scale_cell\n"
        "with scale_cell.PeakRSS() as rss:\n"
        "    before = scale_cell.PeakRSS.now()\n"
        "    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched\n"
        "    del block\n"
        "print(rss.peak - before)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(done.stdout.split()[-1]) > 48 * 2**20


def test_line_falls_back_to_proportional_when_noise_makes_it_negative():
    assert line(1, 2.0, 3, 4.0) == (1.0, 1.0, False)
    assert line(2, 2.0, 4, 1.0) == (0.0, 0.25, True)  # slope < 0: through the origin and the larger point
    assert line(2, 1.0, 4, 3.0) == (0.0, 0.75, True)  # intercept < 0


def test_training_projection_at_the_paper_batch_and_in_proportion_from_another():
    paper = {"iterations": 1600, "batch_size": 64, "n_calibration": 1024}
    probe = {"batch_size": 64, "images": 1024, "wall_s": 5.0, "step_s": [9.0, 1.0, 1.0, 1.0], "peak_rss_gb": 2.0}
    cell = {"status": "ok", "kind": "training", "probes": [probe]}
    p = project_cell(cell, paper, warmup=1)
    assert p["unit_s"] == 1.0 and p["setup_s"] == 0.0 and p["projected_s"] == 1600
    assert p["memory"]["peak_rss_gb_at_paper"] == 2.0
    small = [{"batch_size": 4, "images": 4, "wall_s": 9.0, "step_s": [5.0, 3.0]}]
    p = project_cell({"status": "ok", "kind": "training", "probes": small, "runs_per_cell": 5}, paper, warmup=1)
    assert p["unit_s"] == pytest.approx(3.0 * 64 / 4)  # 3 s a step at batch 4
    # five searched runs; each one's setup, 1 s on 4 images, in proportion on the paper's 1,024
    assert p["setup_s"] == pytest.approx(256) and p["projected_s"] == pytest.approx(5 * (256 + 1600 * 48.0))


def test_layerwise_projection_fits_images_and_iterations_then_scales_by_macs():
    probes = [
        {"images": 2, "iterations": 2, "wall_s": 3.0},
        {"images": 6, "iterations": 2, "wall_s": 7.0},  # 1 s an image
        {"images": 2, "iterations": 6, "wall_s": 5.0},  # 0.5 s an iteration
    ]
    cell = {"status": "ok", "kind": "layer-wise", "probes": probes, "layers_timed": ["a", "b"]}
    cell.update(macs_total=400, macs_timed=100, params_total=10, params_timed=5)
    p = project_cell(cell, {"n_calibration": 10, "iterations": 102}, warmup=0)
    timed = 1.0 + 1.0 * 10 + 0.5 * 100  # c0 = 3 - 2 at 2 iterations, then 100 iterations more
    assert p["projected_s"] == pytest.approx(4 * timed) and p["projected_s_by_params"] == pytest.approx(2 * timed)
    assert p["unit_s"] == pytest.approx(timed / 2)


def test_a_layerwise_projection_scales_only_the_layers_time_and_adds_the_runs_own_once():
    probes = [
        {"images": 2, "iterations": 2, "wall_s": 4.0, "layers_s": 3.0},  # 1 s spent once
        {"images": 6, "iterations": 2, "wall_s": 9.0, "layers_s": 7.0},  # 2 s: 0.5 + 0.25 an image
        {"images": 2, "iterations": 6, "wall_s": 6.0, "layers_s": 5.0},
    ]
    cell = {"status": "ok", "kind": "layer-wise", "probes": probes, "layers_timed": ["a", "b"]}
    cell.update(macs_total=400, macs_timed=100, params_total=10, params_timed=5)
    p = project_cell(cell, {"n_calibration": 10, "iterations": 102}, warmup=0)
    timed, once = 1.0 + 1.0 * 10 + 0.5 * 100, 0.5 + 0.25 * 10
    assert p["once_s"] == pytest.approx(once) and p["passes"] == "once"
    assert p["projected_s"] == pytest.approx(4 * timed + once)
    assert p["projected_s_by_params"] == pytest.approx(2 * timed + once)
    # a once-part that shrinks with the images (noise) is held at its larger value, not made proportional
    probes[1]["wall_s"] = 7.5
    assert project_cell(cell, {"n_calibration": 10, "iterations": 102}, warmup=0)["once_s"] == pytest.approx(1.0)
    # probes that did not say how their time split are scaled whole, and the table says so
    for probe in probes:
        del probe["layers_s"]
    old = project_cell(cell, {"n_calibration": 10, "iterations": 102}, warmup=0)
    assert old["passes"] == "scaled with the layers" and old["once_s"] == 0.0
    result = {"device": "cpu", "device_description": "cpu", "mode": "small", "sizes": {}, "cells": []}
    result["cells"] = [{**cell, "model": "m", "method": "pot-l2norm", "projection": old}]
    result |= {"grid": grid_hours({}, {}), "command": "c", "git_commit": "x", "torch": "t", "threads": 1}
    result |= {"load_end": "0", "created": "now", "wall_s": 1.0}
    assert "(the run's own passes scaled with the layers too)" in scale.markdown(result)


@pytest.mark.parametrize("method", ["pot-l2norm", "obs"])
def test_a_layerwise_probe_says_how_much_of_its_time_went_to_its_layers(method, monkeypatch):
    """On a real run: the pruned layer's row and passes take part of the wall time; the rest is the run's own, and
    POT's includes its network-error pass over the whole model, which a run makes once whatever its layers (made
    to last at least 0.2 s here, so the split is checked without betting on this machine's speed)."""
    import baselines.pot

    network_errors = baselines.pot.network_errors

    def slow_network_errors(*args, **kwargs):
        time.sleep(0.2)
        return network_errors(*args, **kwargs)

    monkeypatch.setattr(baselines.pot, "network_errors", slow_network_errors)
    torch.manual_seed(0)
    template = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=4),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 4),
    )
    overrides = {"filter_fn": lambda module, name: name == "0"}
    if method == "pot-l2norm":
        overrides["iterations"] = 4

    def probe(**kw):
        return scale_cell.run_probe(
            fcpts.get_method(method), lambda: copy.deepcopy(template), 16, {"seed": 0}, overrides, "cpu", **kw
        )

    timed = probe(layer_wise=True)
    assert 0 < timed["layers_s"] <= timed["wall_s"]
    if method == "pot-l2norm":
        assert timed["wall_s"] - timed["layers_s"] >= 0.2
    assert "layers_s" not in probe()


def test_grid_counts_the_papers_tables_and_each_cell_once(tmp_path):
    cells = paper_grid_cells()
    assert {t: len(c) for t, c in cells.items()} == {"table3": 100, "table4": 18, "table1": 9}
    minutes = {(m, meth): 60.0 for t in cells.values() for m, meth, _ in t}
    hours = grid_hours(cells, minutes)
    assert hours["unique_cells"] == 121 and hours["total_hours"] == pytest.approx(121)  # Table 1 repeats six
    assert hours["tables"]["table1"]["hours"] == pytest.approx(9) and not hours["missing"]
    del minutes[("vit_large", "fcpts")]
    assert grid_hours(cells, minutes)["tables"]["table4"]["missing"] == 3


def test_a_finished_cell_is_kept_only_where_its_kind_of_probe_is_unchanged():
    other_batch = {**scale.SMALL, "batch_sizes": [4]}
    assert scale.same_probes("one-shot", scale.SMALL, other_batch, "erk")
    assert scale.same_probes("layer-wise", scale.SMALL, other_batch, "obs")
    assert not scale.same_probes("training", scale.SMALL, other_batch, "fcpts")
    assert not scale.same_probes("layer-wise", scale.SMALL, {**scale.SMALL, "layers": 3}, "obs")
    # cells made before the probes chose as at the paper's size: POT's and obs's measured again, those of a method
    # with no such choices (magnitude-bn) kept
    before = {k: v for k, v in scale.SMALL.items() if k != "paper_choices"}
    assert not scale.same_probes("layer-wise", before, scale.SMALL, "pot-erk")
    assert not scale.same_probes("layer-wise", before, scale.SMALL, "obs")
    assert scale.same_probes("layer-wise", before, scale.SMALL, "magnitude-bn")


def test_the_paper_grid_mode_runs_the_grids_pairs_and_keeps_merged_cells():
    args = scale.parse_args(["--paper-grid"])
    pairs = scale.cells_to_run(args, {})
    grid = {(m, meth) for cells in paper_grid_cells().values() for m, meth, _ in cells}
    assert set(pairs) == grid and len(pairs) == len(grid) == 27  # 5 CNNs x 4 + 2 ViTs x 3 + ResNet-18's STR
    assert pairs[0][0] == "resnet18" and pairs[-1][0] == "vit_large"  # the paper's model order
    kept = scale.cells_to_run(args, {("resnet50", "obs"): {}})
    assert ("resnet50", "obs") in kept and len(kept) == 28
    assert scale.cells_to_run(scale.parse_args(["--models", "resnet18", "--methods", "erk", "obs"]), {}) == [
        ("resnet18", "erk"),
        ("resnet18", "obs"),
    ]
    with pytest.raises(SystemExit):
        scale.parse_args(["--paper-grid", "--models", "resnet18"])


def test_a_gpu_run_refuses_to_merge_another_gpus_cells(tmp_path, monkeypatch):
    earlier = {"device_description": "cuda: NVIDIA H200", "git_commit": "abc", "sizes": scale.FULL, "cells": []}
    merged = tmp_path / "scale_cuda.json"
    merged.write_text(json.dumps(earlier))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(scale, "device_description", lambda device: "cuda: NVIDIA H100 80GB HBM3")
    argv = ["--device", "cuda", "--paper-grid", "--merge", str(merged), "--out", str(tmp_path / "new.json")]
    with pytest.raises(SystemExit, match="measured on cuda: NVIDIA H200, this run on cuda: NVIDIA H100"):
        scale.main(argv)
    assert not (tmp_path / "new.json").exists()


def test_again_measures_a_merged_methods_cells_anew_and_keeps_this_outputs_own(tmp_path):
    committed = REPO_ROOT / "results" / "benchmarks" / "scale_cpu_small.json"
    cells = ["--small", "--models", "resnet18", "--methods", "erk", "fcpts", "--merge-only"]

    def statuses(*argv: str, out: str = "scale.json") -> dict[str, str]:
        return {c["method"]: c["status"] for c in scale.main([*cells, *argv, "--out", str(tmp_path / out)])["cells"]}

    assert statuses("--merge", str(committed)) == {"erk": "ok", "fcpts": "ok"}
    first = json.loads((tmp_path / "scale.json").read_text())
    took = sum(c["cell_s"] for c in first["cells"])  # a merged table's time is its cells', not the merge's
    assert first["merged_cells_s"] == pytest.approx(took) and took > 1
    assert f"merged: its cells took {took:,.0f} s together" in (tmp_path / "scale.md").read_text()
    assert statuses("--resume", "--again", "fcpts") == {"erk": "ok", "fcpts": "ok"}  # measured by this output
    again = statuses("--merge", str(committed), "--again", "fcpts", out="again.json")
    assert again == {"erk": "ok", "fcpts": "not measured"}  # merged: to be measured anew (here: nothing is)
    with pytest.raises(SystemExit):
        scale.parse_args(["--again", "nope"])


def test_bad_model_or_method_is_refused_before_any_cell(capsys):
    with pytest.raises(SystemExit):
        scale.parse_args(["--models", "resnet19"])
    assert "unknown ImageNet model 'resnet19'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        scale.parse_args(["--methods", "nope"])
    assert "unknown method 'nope'" in capsys.readouterr().err


def test_small_cell_runs_a_one_shot_method_in_its_own_process(tmp_path):
    out = tmp_path / "scale.json"
    result = scale.main(["--small", "--models", "resnet18", "--methods", "erk", "--out", str(out), "--threads", "1"])
    (cell,) = result["cells"]
    assert cell["status"] == "ok" and cell["kind"] == "one-shot" and cell["probes"][0]["peak_rss_gb"] > 0.05
    assert cell["projection"]["projected_s"] == cell["probes"][0]["wall_s"]
    text = out.with_suffix(".md").read_text()
    assert "| resnet18 | erk | one-shot |" in text and "whole grid (unique cells) | 121 |" in text
    assert scale.GRID_TABLES["table3"] in text


def test_a_cache_bounded_methods_memory_line_is_capped_at_its_cache():
    cell = {"probes": [{"images": 256, "peak_cuda_gb": 2.0}, {"images": 512, "peak_cuda_gb": 3.0}]}
    free = scale.project_memory(cell, "images", 10240)
    assert free["peak_cuda_gb_at_paper"] == pytest.approx(1.0 + 10240 / 256) and "cache_bounded_gb" not in free
    capped = scale.project_memory(cell, "images", 10240, bound_gb=16.0)
    assert capped["peak_cuda_gb_at_paper"] == pytest.approx(17.0) and capped["cache_bounded_gb"] == 16.0
    assert scale.project_memory(cell, "images", 600, bound_gb=16.0)["peak_cuda_gb_at_paper"] < 17.0
    # the bound comes from the method's options: POT holds four cache-sized buffers, obs one, FCPTS none
    assert scale.cache_bound_gb("pot-l2norm", scale.paper_budget("pot-l2norm")) == 16.0
    assert scale.cache_bound_gb("obs", scale.paper_budget("obs")) == 4.0
    assert scale.cache_bound_gb("fcpts", scale.paper_budget("fcpts")) is None


def test_a_layerwise_cell_makes_one_untimed_call_before_its_timed_probes(monkeypatch):
    import tasks.imagenet.models as models

    calls, chosen = [], []

    def fake_probe(method, build, n_images, budget, overrides, device, layer_wise=False):
        calls.append((n_images, overrides.get("iterations")))
        chosen.append(overrides.get("choose_for"))
        return {"images": n_images, "wall_s": 1.0}

    monkeypatch.setattr(models, "architecture", lambda name: nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3)))
    monkeypatch.setattr(scale_cell, "run_probe", fake_probe)
    paper = {"paper_images": 10240, "paper_iterations": 20000}
    spec = {"model": "resnet18", "method": "pot-l2norm", "device": "cpu", "options": {}, **paper, **scale.FULL}
    result = scale_cell.run_cell(spec)
    assert calls == [(256, 8), (256, 100), (512, 100), (256, 200)]  # the first one untimed (past a CUDA graph capture)
    assert [p["images"] for p in result["probes"]] == [256, 512, 256]
    # every probe chooses as the paper's size would (cached or recomputed inputs, Gram statistics or forward)
    assert chosen == [{"images": 10240, "iterations": 20000}] * 4
    # earlier cells without these are measured again
    assert {"warmup_probe", "paper_choices"} <= set(scale.SIZES_OF_KIND["layer-wise"])
    chosen.clear()
    scale_cell.run_cell({**spec, "method": "obs"})  # obs keeps inputs or reaches units from the image, no iterations
    assert chosen == [{"images": 10240}] * 3
    chosen.clear()
    scale_cell.run_cell({**spec, "method": "magnitude-bn"})  # no such choices to make
    assert set(chosen) == {None}
