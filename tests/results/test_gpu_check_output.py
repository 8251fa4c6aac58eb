"""What the GPU check measured on lent H200s (results/benchmarks/gpu_check_h200/, gpu_check_h200_2026-11-27/ and
gpu_check_h200_2026-11-28/, scale_cuda.*, step_time*_cuda.txt, pot_step_time_cuda.txt, and the CPU's batch times
they are set against): the records read back
whole and name the GPU, and the numbers docs/notebook/benchmarks.md quotes are the ones in those files."""

from __future__ import annotations

import copy
import json
import re
from collections import Counter

import pytest

from benchmarks.scale import scale
from benchmarks.scale.scale import paper_grid_cells
from tasks.grid.paths import REPO_ROOT, RESULTS_DIR
from tasks.grid.records import read_record
from tests.results.git_history import text_at

CHECK = RESULTS_DIR / "benchmarks" / "gpu_check_h200"
RECORDS = CHECK / "records" / "cifar" / "cifar10"
SECOND = RESULTS_DIR / "benchmarks" / "gpu_check_h200_2026-11-27"
THIRD = RESULTS_DIR / "benchmarks" / "gpu_check_h200_2026-11-28"
FOURTH = RESULTS_DIR / "benchmarks" / "gpu_check_h200_2026-11-28b"
DOC = " ".join((REPO_ROOT / "docs" / "notebook" / "benchmarks.md").read_text().split())


@pytest.fixture(scope="module")
def records() -> dict[str, dict]:
    return {
        "fp32": read_record(RECORDS / "resnet56" / "fcpts-sp90-fast-seed0.json"),
        "bf16": read_record(RECORDS / "resnet56" / "fcpts-sp90-fast-ampbf16-seed0.json"),
        "r32": read_record(RECORDS / "resnet32" / "fcpts-sp80-paper-seed0.json"),
    }


def test_the_gpu_records_name_the_gpu_hit_their_target_and_say_what_they_evaluated(records):
    for r in records.values():
        assert r["device"] == "cuda: NVIDIA H200" and r["hit_target"]
        assert r["metrics"]["n_images"] == 2000 and r["data"]["root"].endswith("gpu_data")  # the check's subset
        assert len(r["calibration"]["indices"]) == r["calibration"]["n_images"]
    assert records["bf16"]["method_options"]["amp"] == "bf16" and records["fp32"]["method_options"]["amp"] is None
    assert records["r32"]["method_report"]["extra"]["resumed_from_step"] == 1500  # finished on a second call


def test_the_doc_quotes_the_gpu_records(records):
    fp32, bf16, r32 = (records[k]["metrics"]["top1"] for k in ("fp32", "bf16", "r32"))
    assert f"float32 {fp32:.2f}" in DOC and f"bfloat16 {bf16:.2f}" in DOC
    assert f"{abs(bf16 - fp32):.2f} points" in DOC and abs(bf16 - fp32) <= 0.3
    assert f"top-1 {r32:.2f}" in DOC and f"{records['r32']['wall_s']:.0f} s" in DOC


STEP = r"fcpts step, (.+?)\s*:\s+(\S+) ms, plain step\s+(\S+) ms, ratio (\d+\.\d+)"
FLOOR = r"teacher forward alone .*?(?:, (\w+))?:\s+(\S+) ms, (\S+) of the plain step .* below (\S+)"


def step_rows(text: str) -> dict[str, tuple[str, str, str]]:
    """configuration -> (FCPTS ms, plain ms, ratio) of a step_time output."""
    return {name: rest for name, *rest in re.findall(STEP, text)}


def floors(text: str) -> dict[str, tuple[str, str, str]]:
    """how the steps ran ('' on a CPU) -> (teacher ms, share of a plain step, floor) of a step_time output."""
    return {how: rest for how, *rest in re.findall(FLOOR, text)}


def test_the_first_eager_gpu_step_output_is_the_one_it_replaced():
    first = (CHECK / "first_call_step_time.txt").read_text()  # eager steps only, the first H200 check
    ratios = [r for *_, r in step_rows(first).values()]
    assert len(ratios) == 4 and "NVIDIA H200" in first
    assert first == text_at("1c764b2", "results/benchmarks/step_time_cuda.txt")  # what it was until replaced


def test_the_doc_quotes_the_like_for_like_gpu_step_and_its_floor():
    text = (RESULTS_DIR / "benchmarks" / "step_time_cuda.txt").read_text()
    assert text == (FOURTH / "second_call_step_time.txt").read_text()
    assert "replayed from a CUDA graph where FCPTS's is" in text.splitlines()[0] and "NVIDIA H200" in text
    for line in text.splitlines()[:11]:
        assert " ".join(line.split()) in DOC
    ratio = {name: float(r) for name, (_, _, r) in step_rows(text).items()}  # as the doc says, against the goal:
    over = ("mse-blocks (defaults)", "kl", "mse-blocks (defaults), amp bf16")
    assert all(ratio[name] > 1.35 for name in over) and ratio["kl, amp bf16"] < 1.35
    r18 = step_rows((FOURTH / "second_call_step_time_resnet18_224.txt").read_text())
    r18_eager, r18_replayed = r18["mse-blocks (defaults), eager"][0], r18["mse-blocks (defaults)"][0]
    assert f"a 224-px ResNet-18 step from {r18_eager} to {r18_replayed} ms on the same GPU" in DOC
    unfair = step_rows((FOURTH / "step_time.txt").read_text())["mse-blocks (defaults)"]
    assert float(unfair[2]) < 1 and f"the ratio came out at {unfair[2]}" in DOC  # less work than a plain step: unfair


def scale_cuda() -> dict:
    return json.loads((RESULTS_DIR / "benchmarks" / "scale_cuda.json").read_text())


def test_the_gpu_scale_output_is_regenerated_from_its_probes():
    result = scale_cuda()
    assert result["device_description"] == "cuda: NVIDIA H200"
    measured = {(c["model"], c["method"]) for c in result["cells"] if c["status"] == "ok"}
    grid = {(m, meth) for t in paper_grid_cells().values() for m, meth, _ in t}
    obs = {(m, "obs") for m in ("resnet18", "resnet50", "vit_base")}
    assert measured == grid | obs and len(result["cells"]) == len(grid | obs) == 30  # the whole grid
    by_commit = Counter(c["git_commit"][:7] for c in result["cells"])
    assert by_commit == {"aae19ca": 9, "58e80e0": 21}  # 2026-11-27's nine cells kept, the rest measured after
    again = scale.finish(copy.deepcopy(result), result["sizes"])
    assert [c.get("projection") for c in again["cells"]] == [c.get("projection") for c in result["cells"]]
    assert scale.markdown(result) == (RESULTS_DIR / "benchmarks" / "scale_cuda.md").read_text()


def test_the_doc_quotes_the_grids_memory_and_speed_and_they_meet_the_goals():
    cells = {(c["model"], c["method"]): c["projection"] for c in scale_cuda()["cells"]}
    cuda = {k: p["memory"]["peak_cuda_gb_at_paper"] for k, p in cells.items()}
    vits = ("vit_base", "vit_large")
    cnn = max((v, k) for k, v in cuda.items() if k[0] not in vits)
    assert cnn[1] == ("resnet50", "pot-l2norm") and cnn[0] <= 24  # the goal: every CNN cell in 24 GB
    assert f"every CNN cell at most {cnn[0]:.1f} GB of CUDA memory (POT on ResNet-50;" in DOC
    fcpts_cnn = max((v, k) for k, v in cuda.items() if k[0] not in vits and k[1] == "fcpts")
    assert fcpts_cnn[1] == ("resnet50", "fcpts") and f"FCPTS at most {fcpts_cnn[0]:.1f} GB on a CNN (ResNet-50)" in DOC
    large = {meth: v for (m, meth), v in cuda.items() if m == "vit_large"}
    assert max(large, key=large.get) == "fcpts" and large["fcpts"] <= 80  # the goal: ViT-L in 80 GB
    pot_large = max(v for meth, v in large.items() if meth.startswith("pot"))
    assert f"ViT-L's cells at most {large['fcpts']:.1f} GB (FCPTS; POT {pot_large:.1f} GB)" in DOC
    minutes = {k: p["projected_s"] for k, p in cells.items()}
    ratios = [minutes[(m, meth)] / minutes[(m, "fcpts")] for m, meth in minutes if meth.startswith("pot")]
    assert f"a POT cell takes {min(ratios):.1f} to {max(ratios):.1f} times FCPTS's on the same model" in DOC
    for model in {m for m, _ in minutes}:  # FCPTS the fastest of the paper's methods on every model
        paper = {meth: v for (m, meth), v in minutes.items() if m == model and meth != "obs"}
        assert min(paper, key=paper.get) == "fcpts", model
    grid = scale_cuda()["grid"]
    assert not grid["missing"] and f"the whole grid {grid['total_hours']:.1f} GPU-hours on one H200" in DOC


def test_the_doc_quotes_the_224_px_step_ratios():
    ratios = []
    for model in ("resnet18", "resnet50"):  # eager, the third H200 check's
        text = (THIRD / f"step_time_{model}_224.txt").read_text()
        assert text == text_at("1c764b2", f"results/benchmarks/step_time_{model}_224_cuda.txt")
        assert f"model {model} at 224 px, batch 64, cuda: NVIDIA H200" in text
        (f_ms, p_ms, ratio), _ = step_rows(text).values()
        if model == "resnet18":
            assert f"a plain ResNet-18 step takes {float(p_ms):.0f} ms and most of the" in DOC
            assert f"most of the {float(f_ms) - float(p_ms):.0f} ms FCPTS adds is not arithmetic" in DOC
        ratios.append(ratio)
    assert f"{ratios[0]} and {ratios[1]} on random-weight torchvision ResNet-18 and ResNet-50 at 224 px" in DOC


def test_the_doc_quotes_the_replayed_224_px_steps_and_the_copy_streams_effect():
    ratios = {}
    for model in ("resnet18", "resnet50"):
        text = (RESULTS_DIR / "benchmarks" / f"step_time_{model}_224_cuda.txt").read_text()
        assert text == (FOURTH / f"third_call_step_time_{model}_224.txt").read_text()
        assert "commit 1c764b2" in text and "replayed from a CUDA graph where FCPTS's is" in text
        for line in text.splitlines()[:7]:
            if "eager" not in line:  # the replayed rows, as committed
                assert " ".join(line.split()) in DOC
        before = step_rows((FOURTH / f"second_call_step_time_{model}_224.txt").read_text())
        after = step_rows(text)
        ratios[model] = before["mse-blocks (defaults)"][2], after["mse-blocks (defaults)"][2], floors(text)
    (r18_before, r18_after, r18_floor), (r50_before, r50_after, r50_floor) = ratios["resnet18"], ratios["resnet50"]
    assert (
        f"ResNet-18 ratio went from {r18_before} to {r18_after} and ResNet-50's from {r50_before} to {r50_after}" in DOC
    )
    assert f"on ResNet-18 ({r18_after} against {r18_floor['replayed'][2]})" in DOC
    share = r50_floor["replayed"][1]
    assert float(r50_floor["replayed"][2]) > 1.35 and f"forward alone is {share} of a plain step" in DOC


def test_the_third_h200_check_and_its_profile_are_quoted():
    smoke = (THIRD / "smoke.log").read_text()
    passed, skipped = re.search(r"(\d+) passed, (\d+) skipped", smoke).groups()
    assert "failed" not in smoke.splitlines()[-1]  # POT's two graph tests ran (their durations) and passed
    assert smoke.count("test_cuda_graph_steps_equal_the_eager_steps[") == 2
    assert f"smoke: {passed} `cuda` tests passed, {skipped} skipped" in DOC
    scale_s = re.search(r"^scale\s+passed\s+(\d+\.\d) s", (THIRD / "summary.txt").read_text(), re.M).group(1)
    assert f"20 of the grid's 21 missing cells in {scale_s} s" in DOC
    third = re.search(r"^vit_large\s+fcpts\s+ok\s+(\d+\.\d) s", (THIRD / "third_call_scale.log").read_text(), re.M)
    assert f"to measure that cell ({third.group(1)} s)" in DOC
    profile = (THIRD / "fourth_call_profile_r18_224.txt").read_text()
    fetch = re.search(r"fetch\+stack\+H2D ms (\d+\.\d+)", profile).group(1)
    assert f"copied to the device took {fetch} ms" in DOC
    sync = re.search(r"cudaStreamSynchronize\s+\S+\s+(\d+\.\d)\d*ms.*?\s(\d+)\s*$", profile, re.M)
    assert f"the host waited on the device {sync.group(2)} times (`cudaStreamSynchronize`, {sync.group(1)} ms)" in DOC
    perm = re.search(r"aten::randperm\s+\S+\s+(\d+\.\d)\d*ms", profile).group(1)
    assert f"spent {perm} ms of host time in random permutations" in DOC
    kth = re.search(r"aten::kthvalue(?:\s+\S+){4}\s+\S+\s+\S+\s+(\d+\.\d+)%", profile).group(1)
    assert f"`kthvalue` took {kth}% of the device's time" in DOC


def operator_counts(text: str) -> tuple[str, list[tuple[str, str]], str]:
    """(plain step, [(FCPTS with the block MSE, ratio), (with the KL, ratio)], POT step) of a step_ops output."""
    plain = re.search(r"plain step\s+:\s+(\d+) operators", text).group(1)
    fcpts = re.findall(r"fcpts step, .*?:\s+(\d+) operators, ratio (\d+\.\d+)", text)
    pot = re.search(r"pot step, .*?:\s+(\d+) operators", text).group(1)
    return plain, fcpts, pot


def test_the_doc_quotes_the_operator_counts_before_and_after_the_flat_masks():
    plain, ((blocks, r_blocks), (kl, r_kl)), _ = operator_counts(
        (RESULTS_DIR / "benchmarks" / "step_ops_cpu.txt").read_text()
    )
    assert (
        f"plain ResNet-56 step dispatches {plain}, an FCPTS step now {blocks} with the block MSE (ratio {r_blocks})"
        f" and {kl} with the KL alone (ratio {r_kl})" in DOC
    )
    old_plain, ((old_blocks, old_r_blocks), (old_kl, old_r_kl)), old_pot = operator_counts(
        text_at("3021af6", "results/benchmarks/step_ops_cpu.txt")
    )
    assert (
        f"counted {old_blocks} operators for an FCPTS step with the block MSE and {old_kl} with the KL alone, "
        f"against {old_plain} for a plain ResNet-56 step (ratios {old_r_blocks} and {old_r_kl}, in the history at "
        "3021af6)" in DOC
    )
    assert f"a step dispatching {old_pot} operators whatever the layers' size" in DOC
    kl_line = (RESULTS_DIR / "benchmarks" / "step_ops_cpu.txt").read_text().splitlines()[3]
    added = dict(re.findall(r"(\w+) \+(\d+)", kl_line))
    assert kl_line.startswith("fcpts step, kl")
    # what FCPTS still adds is the teacher's forward: as many convolutions, batch norms and ReLUs; no per-layer
    # sigmoid or standard deviation is left among the most added
    assert added["conv2d"] == added["batch_norm"] == added["relu_"] and not {"sigmoid", "std"} & set(added)
    assert "What it still adds with the KL alone is mostly the teacher's forward." in DOC


def test_the_second_h200_check_ran_pot_from_cuda_graphs_and_the_doc_quotes_it():
    records = SECOND / "records" / "cifar" / "cifar10" / "resnet32"
    pot, fcpts = (read_record(records / f"{m}-sp80-paper-seed0.json") for m in ("pot-l2norm", "fcpts"))
    for r in (pot, fcpts):
        assert r["device"] == "cuda: NVIDIA H200" and r["hit_target"] and r["metrics"]["n_images"] == 2000
    assert pot["budget"]["options"]["iterations"] == 20_000
    assert {row["steps_on"] for row in pot["per_layer"]} == {"cuda-graph"}
    assert {row["iterations"] for row in pot["per_layer"]} == {20_000}  # none stopped early: the whole budget
    assert pot["wall_s"] < 5 * 60  # the goal
    assert f"all 32 layers in {pot['wall_s']:.0f} s of method time" in DOC
    assert f"FCPTS at the same budget: {fcpts['metrics']['top1']:.2f}, {fcpts['wall_s']:.0f} s" in DOC
    cpu = read_record(RESULTS_DIR / "runs" / "cifar" / "cifar10" / "resnet32" / "pot-l2norm-sp80-paper-seed0.json")
    assert f"a CPU thread took {cpu['wall_s'] / 60:.0f} minutes" in DOC
    summary = json.loads((SECOND / "summary.json").read_text())
    passed = [p["part"] for p in summary["parts"] if p["status"] == "passed"]
    assert len(passed) == 6 and len(summary["parts"]) == 8 and "six of eight parts passed" in DOC


def test_the_doc_quotes_the_pot_step_times():
    text = (RESULTS_DIR / "benchmarks" / "pot_step_time_cuda.txt").read_text()
    eager, graphed = (float(x) for x in re.findall(r"pot step, .*?:\s+(\d+\.\d+) ms", text))
    speedup = re.search(r"speed-up (\d+\.\d+)x", text).group(1)
    assert "NVIDIA H200" in text and "(replayed)" in text
    assert f"{eager:.3f} ms eager, {graphed:.3f} ms replayed, {speedup}x" in DOC


def test_the_doc_quotes_the_projected_grid_hours():
    md = (RESULTS_DIR / "benchmarks" / "scale_cuda.md").read_text()
    for table, name in (("CNNs (Table 3)", "CNNs"), ("ViTs (Table 4)", "ViTs"), ("learned masks (Table 1)", "learned")):
        cells, hours, missing = re.search(rf"\| {re.escape(table)} \| (\d+) \| (\d+\.\d+) \| (\d+) \|", md).groups()
        assert f"{table} {hours} GPU-hours over {int(cells) - int(missing)} of its {cells}" in DOC, name


def test_the_doc_quotes_the_batch_fetch_times():
    text = (RESULTS_DIR / "benchmarks" / "batch_fetch_cpu.txt").read_text()
    ms = dict(re.findall(r"^(.+?)\s*:\s+(\d+\.\d+) ms$", text, re.M))
    speedup = re.search(r"(\d+\.\d)x faster as one sum", text).group(1)
    assert "batch 64 at 224 px" in text and "+dirty" not in text
    assert f"batch of 64 takes {ms['Calibration.batch (index, stack, checks)']} ms" in DOC
    assert f"the stack alone {ms['stack alone']} ms" in DOC
    one_sum, element_wise = ms["finiteness, one sum (all_finite)"], ms["finiteness, element-wise (before)"]
    assert f"one sum {one_sum} ms against {element_wise} ms element-wise ({speedup}x)" in DOC


def test_the_doc_quotes_where_a_cpu_step_goes():
    text = (RESULTS_DIR / "benchmarks" / "step_profile_cpu.txt").read_text()
    plain_ms = float(re.search(r"^plain step: host\s+(\d+\.\d+) ms", text, re.M).group(1))
    ops = {
        who: dict(re.findall(r"aten::(\w+) (\d+\.\d+)", re.search(rf"^{who} host, most: (.*)$", text, re.M).group(1)))
        for who in ("plain", "fcpts")
    }
    fwd, bwd = "mkldnn_convolution", "convolution_backward"
    assert f"forward convolutions took {ops['fcpts'][fwd]} ms against the plain step's {ops['plain'][fwd]}" in DOC
    assert f"backward ones {ops['fcpts'][bwd]} against {ops['plain'][bwd]}" in DOC
    extra = (float(ops["fcpts"][fwd]) - float(ops["plain"][fwd])) / plain_ms
    assert f"add {extra:.2f} of a plain step ({plain_ms} ms there)" in DOC
    assert f"leave {1.35 - 1 - extra:.2f} of a plain step" in DOC


def test_the_fourth_h200_check_its_replayed_records_and_profile_are_quoted():
    first = (FOURTH / "smoke.log").read_text().splitlines()[-1]
    failed, passed, skipped = (int(n) for n in re.search(r"(\d+) failed, (\d+) passed, (\d+) skipped", first).groups())
    assert failed == 1 and f"The smoke part's one failure, of {failed + passed + skipped} tests" in DOC
    second = (FOURTH / "second_call_smoke.log").read_text()
    passed, skipped = re.search(r"^(\d+) passed, (\d+) skipped", second.splitlines()[-1]).groups()
    assert "failed" not in second.splitlines()[-1]
    assert f"{passed} `cuda` tests passed, {skipped} skipped" in DOC
    summary = json.loads((FOURTH / "summary.json").read_text())
    assert [p["part"] for p in summary["parts"] if not p["status"].startswith("passed")] == ["smoke"]
    third = (FOURTH / "third_call_smoke.log").read_text()
    assert re.search(r"^19 passed", third.splitlines()[-1]) and "failed" not in third.splitlines()[-1]
    records = FOURTH / "records" / "cifar" / "cifar10"
    eager = SECOND / "records" / "cifar" / "cifar10"
    quoted = []
    for cell in (
        "resnet56/fcpts-sp90-fast-seed0",
        "resnet56/fcpts-sp90-fast-ampbf16-seed0",
        "resnet32/fcpts-sp80-paper-seed0",
    ):
        replayed, before = read_record(records / f"{cell}.json"), read_record(eager / f"{cell}.json")
        assert replayed["device"] == "cuda: NVIDIA H200" and replayed["hit_target"]
        assert replayed["method_report"]["extra"]["steps_on"] == "cuda-graph"
        assert replayed["mask_sha256"] == before["mask_sha256"]  # the same masks as the eager GPU run's
        assert replayed["metrics"]["top1"] == before["metrics"]["top1"]
        quoted.append((replayed["metrics"]["top1"], replayed["wall_s"], before["wall_s"]))
    (fp32, fp32_s, fp32_eager), (bf16, bf16_s, bf16_eager), (r32, r32_s, r32_eager) = quoted
    assert f"float32 {fp32:.2f} and bfloat16 {bf16:.2f} in {fp32_s:.1f} s and {bf16_s:.1f} s" in DOC
    assert f"({fp32_eager:.0f} s and {bf16_eager:.0f} s eager the day before)" in DOC
    assert f"the paper's budget, {r32:.2f} in {r32_s:.0f} s ({r32_eager:.0f} s eager the day before" in DOC
    pot = (FOURTH / "pot_step_time.txt").read_text()
    eager_ms, graphed_ms = re.findall(r"pot step, .*?:\s+(\d+\.\d+) ms", pot)
    speedup = re.search(r"speed-up (\d+\.\d+)x", pot).group(1)
    assert f"{eager_ms} ms eager, {graphed_ms} ms replayed, {speedup}x" in DOC
    profile = (FOURTH / "step_profile_resnet18_224.txt").read_text()
    row = r"^{}: host\s+(\S+) ms, device\s+(\S+) ms,\s+(\d+) kernel launches,\s+(\d+) graph launches,\s+(\d+) waits"
    p_host, p_dev, p_launch, _, _ = re.search(row.format("plain step"), profile, re.M).groups()
    f_host, f_dev, f_launch, f_graph, f_waits = re.search(row.format("fcpts step"), profile, re.M).groups()
    assert (f_graph, f_waits) == ("1", "0")
    assert f"launching {f_launch} kernels and one graph (the plain step: {p_launch} kernels) with no wait" in DOC
    assert f"its device busy {f_dev} ms a step against the plain step's {p_dev} ms" in DOC
    assert f"The host's {f_host} ms a step (the plain step's: {p_host} ms)" in DOC
    host = dict(re.findall(r"(aten::\w+) (\d+\.\d+)", re.search(r"^fcpts host, most: (.*)$", profile, re.M).group(1)))
    assert f"held `aten::cat` {host['aten::cat']} ms" in DOC and f"`aten::randperm` {host['aten::randperm']} ms" in DOC
    device = dict(
        re.findall(
            r"(aten::\w+) (\d+\.\d+)", re.search(r"^fcpts device by operator, most: (.*)$", profile, re.M).group(1)
        )
    )
    assert f"`aten::copy_` took {device['aten::copy_']} ms a step" in DOC


def test_the_doc_quotes_a_batchs_host_time_against_the_gpu_step_and_the_cells_it_bounded():
    text = (RESULTS_DIR / "benchmarks" / "batch_workers_cpu.txt").read_text()
    assert "batch 64 at 224 px" in text and "+dirty" not in text
    rows = dict(re.findall(r"^(imagenet sample.+?|synthetic.+?)\s{2,}([\d. ]+x)$", text, re.M))
    (imagenet,) = [v.split() for k, v in rows.items() if k.startswith("imagenet")]
    (synthetic,) = [v.split() for k, v in rows.items() if k.startswith("synthetic")]
    for row in (imagenet, synthetic):  # as the doc says: one worker no faster than none, two faster
        assert float(row[1]) >= float(row[0]) and float(row[2]) < float(row[0])
    step = step_rows((RESULTS_DIR / "benchmarks" / "step_time_resnet18_224_cuda.txt").read_text())
    replayed_ms = step["mse-blocks (defaults)"][0]
    assert f"replayed ResNet-18 FCPTS step of {replayed_ms} ms" in DOC
    assert min(float(imagenet[0]), float(synthetic[0])) > float(replayed_ms)  # a batch takes longer than the step
    training = [c for c in scale_cuda()["cells"] if c.get("kind") == "training"]
    steps = [c["projection"]["unit_s"] for c in training]
    assert f"took {min(steps):.3f} to {max(steps):.3f} s a step" in DOC
    for model in ("resnet18", "resnet50"):
        (cell,) = [c for c in training if c["model"] == model and c["method"] == "fcpts"]
        assert cell["git_commit"].startswith("aae19ca")
        assert f"{cell['projection']['unit_s']:.3f} s" in DOC
    for model, ms in (("resnet18", "44.41"), ("resnet50", "75.05")):
        eager = step_rows((THIRD / f"step_time_{model}_224.txt").read_text())
        assert eager["mse-blocks (defaults)"][0] == ms
    assert "alone at 44.41 and 75.05 ms eager the next day" in DOC
