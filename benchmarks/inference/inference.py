"""Benchmark: latency, peak memory and file size of sparse models in each runtime against dense (Table 7), each
runtime against its own dense model, calls interleaved round by round; a missing runtime is reported, not fatal."""

from __future__ import annotations

import copy
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks import parser
from fcpts.core.io import write_json_atomic, write_text_atomic
from fcpts.core.masks import layer_weight, prunable_layers, sparsity_summary
from tasks.deploy.driver import load_sparse_checkpoint, models_from_record, provenance
from tasks.deploy.export import export_onnx, inference_copy, max_abs_diff
from tasks.deploy.runtimes import (
    RuntimeNotInstalled,
    ort_session,
    peak_memory,
    run_worker,
    runtime_version,
    time_interleaved,
)
from tasks.deploy.sparse_storage import write_sparse_files, zlib_size
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.paths import REPO_ROOT, DataNotFoundError, resolve_data_root
from tasks.grid.records import command_line
from tasks.grid.weights import default_cifar_weights, load_checkpoint

TORCH_RUNTIMES = ["torch", "torch-csr"]
PLAIN_1X1 = ((1, 1), 1, (0, 0), (1, 1))  # kernel, groups, padding, dilation


@dataclass
class Family:
    """One architecture at several sparsities: torch models (BN folded) and their ONNX files."""

    name: str
    shape: tuple[int, ...]
    note: str
    models: dict[str, nn.Module] = field(default_factory=dict)  # label -> inference model
    sparsity: dict[str, float] = field(default_factory=dict)
    files: dict[str, dict[str, Path]] = field(default_factory=dict)
    onnx_max_abs_diff: dict[str, float] = field(default_factory=dict)  # ONNX vs torch, per model

    def add(self, model: nn.Module) -> str:
        s = sparsity_summary(model)[0]
        label = "dense" if s < 0.005 else f"{s:.0%}"
        self.models[label], self.sparsity[label] = model, s
        return label


@torch.no_grad()
def random_unstructured(model: nn.Module, rate: float, seed: int) -> nn.Module:
    """Zero exactly round(rate * n) randomly chosen weights in every Conv2d/Linear (in place)."""
    g = torch.Generator().manual_seed(seed)
    for layer in prunable_layers(model).values():
        w = layer_weight(layer).view(-1)
        w[torch.randperm(w.numel(), generator=g)[: round(rate * w.numel())]] = 0.0
    return model


def random_family(name: str, sparsities: list[float], size: int, seed: int) -> Family:
    import torchvision

    builder = {"resnet18": torchvision.models.resnet18, "mobilenet_v2": torchvision.models.mobilenet_v2}[name]
    torch.manual_seed(seed)
    dense = inference_copy(builder(weights=None, num_classes=1000))
    fam = Family(name, (3, size, size), "random weights, uniform random unstructured sparsity in every conv/linear")
    for s in [0.0, *sparsities]:
        fam.add(random_unstructured(inference_copy(dense), s, seed + 1) if s else dense)
    return fam


def cifar_family(checkpoint: Path, data_root: str | None) -> Family:
    """The real sparse CIFAR model of a deploy checkpoint beside the dense weights it started from."""
    sparse, meta = load_sparse_checkpoint(checkpoint, None, None)
    dense = cifar_resnet(meta["model"])
    load_checkpoint(dense, default_cifar_weights(resolve_data_root(data_root), meta["dataset"], meta["model"]))
    fam = Family(f"cifar10-{meta['model']}", (3, 32, 32), f"real weights: FCPTS sparse model {checkpoint.name}")
    for m in (dense, sparse):
        fam.add(inference_copy(m))
    return fam


def record_families(paths: list[Path]) -> list[Family]:
    """Real sparse models of run records, one family per task/dataset/model with the dense weights they began from."""
    fams: dict[tuple, Family] = {}
    for path in paths:
        try:
            dense, sparse, shape, rec = models_from_record(path)
        except DataNotFoundError as e:  # no record yet, or its sparse model (not committed) is not here
            print(f"[skip] {e}")
            continue
        key = (rec["task"], rec["dataset"], rec["model"])
        name = rec["model"] if rec["task"] == "imagenet" else f"{rec['dataset']}-{rec['model']}"
        if key not in fams:
            fams[key] = Family(name, shape, f"real weights ({rec['weights'].get('source') or rec['weights']['path']})")
            fams[key].add(inference_copy(dense))
        label, m = fams[key].add(inference_copy(sparse)), rec["metrics"]
        fams[key].note += (
            f"; {label}: {rec['method']} run record {Path(path).name} (top-1 {m['top1']:.2f} on "
            f"{m['n_images']} {rec['dataset']} images, dense {rec['dense_metrics']['top1']:.2f})"
        )
    return list(fams.values())


def build_families(args) -> dict[str, Family]:
    fams: dict[str, Family] = {}
    for name in args.families:
        if name == "cifar":
            ckpt = Path(args.cifar_checkpoint)
            if not ckpt.is_file():
                print(
                    f"[skip] cifar: no sparse checkpoint at {ckpt}; make one with "
                    "python -m tasks.deploy --record results/runs/cifar/cifar10/resnet56/fcpts-sp90-fast-seed0.json"
                )
                continue
            found = [cifar_family(ckpt, args.data_root)]
        elif name == "records":
            found = record_families([Path(r) for r in args.records])
        else:
            found = [random_family(name, args.sparsity, args.size, seed=0)]
        fams |= {fam.name: fam for fam in found}
    return fams


def export_family(fam: Family, work: Path) -> None:
    """Every model to ONNX beside its sparse storage files, so all runtimes read the same graphs."""
    for label, m in fam.models.items():
        path = work / f"{fam.name}-{label.rstrip('%')}.onnx"
        data = export_onnx(m, path, fam.shape)
        fam.files[label] = write_sparse_files(path)
        x = torch.randn(2, *fam.shape, generator=torch.Generator().manual_seed(0))
        fam.onnx_max_abs_diff[label] = max_abs_diff(m, ort_session(data), x)


class CSRLinear(nn.Module):
    """A Linear, or a 1x1 ungrouped unpadded Conv2d (`stride` given), as y = W x + b with W a CSR matrix (out, in)
    (torch.sparse, MKL on CPU)."""

    def __init__(self, layer: nn.Linear | nn.Conv2d, stride: tuple[int, ...] | None = None):
        super().__init__()
        self.stride = stride
        self.weight = layer.weight.detach().flatten(1).to_sparse_csr()
        self.bias = None if layer.bias is None else layer.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride is None:
            y = (self.weight @ x.t()).t()
            return y if self.bias is None else y + self.bias
        x = x[:, :, :: self.stride[0], :: self.stride[1]]
        n, c, h, w = x.shape
        y = (self.weight @ x.transpose(0, 1).reshape(c, n * h * w)).view(-1, n, h, w).transpose(0, 1)
        return y if self.bias is None else y + self.bias.view(1, -1, 1, 1)


def to_torch_csr(model: nn.Module) -> tuple[nn.Module, float]:
    """A copy with every Linear and plain 1x1 Conv2d on CSR weights (where a sparse GEMM needs no im2col); also
    the share of weights moved."""
    model = copy.deepcopy(model)
    moved = total = 0
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    for name, m in list(prunable_layers(model).items()):
        total += layer_weight(m).numel()
        if isinstance(m, nn.Linear):
            model.set_submodule(name, CSRLinear(m))
        elif isinstance(m, nn.Conv2d) and (m.kernel_size, m.groups, m.padding, m.dilation) == PLAIN_1X1:
            model.set_submodule(name, CSRLinear(m, m.stride))
        else:
            continue
        moved += layer_weight(m).numel()
    return model, moved / total


def speedups(times: dict, dense) -> dict:
    """Per model: median latency (ms), median dense time over median sparse time, the quartiles of the same-round
    ratios (the noise) and the raw times."""
    out = {}
    for k, v in times.items():
        q = statistics.quantiles([d / t for d, t in zip(times[dense], v)], n=4) if len(v) > 1 else [1.0] * 3
        out[k] = {
            "median_ms": 1e3 * statistics.median(v),
            "runs": len(v),
            "speedup": statistics.median(times[dense]) / statistics.median(v),
            "round_ratio_q25_q50_q75": q,
            "times_ms": [round(1e3 * t, 4) for t in v],
        }
    return out


def time_external(runtime: str, fam: Family, batch: int, runs: int, warmup: int, threads: int) -> dict:
    files = [str(fam.files[k]["dense"]) for k in fam.models]
    sizes = ["--batch", str(batch), "--runs", str(runs), "--warmup", str(warmup)]
    r = run_worker(runtime, ["--models", *files, "--shape", *map(str, fam.shape), *sizes], threads)
    times = {k: r["times_s"][f] for k, f in zip(fam.models, files)}
    return {"version": r["version"], "options": r["options"], "results": speedups(times, "dense")}


@torch.inference_mode()
def time_torch(fam: Family, batch: int, runs: int, warmup: int) -> dict[str, dict]:
    """torch eager and torch-CSR, all models of the family interleaved in this process."""
    x = torch.randn(batch, *fam.shape)
    runners, moved = {}, 0.0
    for label, m in fam.models.items():
        runners[("torch", label)] = m
        if label != "dense":
            csr, moved = to_torch_csr(m)
            err = (csr(x[:2]) - m(x[:2])).abs().max().item()
            assert err < 1e-3, f"CSR model differs from the dense one by {err}"
            runners[("torch-csr", label)] = csr
    out: dict[str, dict] = {"torch": {}, "torch-csr": {}}
    for (rt, label), res in speedups(time_interleaved(runners, x, warmup, runs), ("torch", "dense")).items():
        out[rt][label] = res
    out["torch-csr"]["dense"] = out["torch"]["dense"]  # CSR's own dense reference: dense kernels
    options = {"torch": {}, "torch-csr": {"csr_weight_share": moved}}
    return {rt: {"version": torch.__version__, "options": options[rt], "results": out[rt]} for rt in out}


def measure_memory(fam: Family, runtimes: list[str], threads: int) -> dict:
    """VmHWM of a fresh process per file: onnxruntime for each storage format, DeepSparse for the plain file."""
    mem = {}
    for label, files in fam.files.items():
        mem[label] = {f"onnxruntime:{k}": peak_memory("onnxruntime", p, fam.shape, threads) for k, p in files.items()}
        if "deepsparse" in runtimes:
            mem[label]["deepsparse:dense"] = peak_memory("deepsparse", files["dense"], fam.shape, threads)
    return mem


def available_runtimes(wanted: list[str]) -> tuple[list[str], dict[str, str]]:
    """The runtimes that import, and for the others the reason with install instructions."""
    ok, missing = [], {}
    for rt in wanted:
        try:
            if rt not in TORCH_RUNTIMES:
                runtime_version(rt)
            ok.append(rt)
        except RuntimeNotInstalled as e:
            missing[rt] = str(e)
    return ok, missing


def measure_family(fam: Family, runtimes: list[str], args, merging: bool, result: dict) -> dict:
    """Every runtime's latency at batch 1 and 32, the files' sizes and (unless --no-memory) peak memory."""
    t0 = time.perf_counter()
    fr: dict[str, Any] = {
        "shape": list(fam.shape),
        "note": fam.note,
        "sparsity": fam.sparsity,
        "latency": {},
        "file_bytes": {
            label: {**{k: p.stat().st_size for k, p in files.items()}, "dense_zlib": zlib_size(files["dense"])}
            for label, files in fam.files.items()
        },
        "memory": {},
        "onnx_max_abs_diff": fam.onnx_max_abs_diff,
        "provenance": {**provenance(args.threads), "command": command_line(), "merged": merging},
    }
    for batch, runs in (("1", args.runs_b1), ("32", args.runs_b32)):
        timed = {
            rt: time_external(rt, fam, int(batch), runs, args.warmup, args.threads)
            for rt in runtimes
            if rt not in TORCH_RUNTIMES
        }
        if set(TORCH_RUNTIMES) & set(runtimes):
            timed |= {rt: r for rt, r in time_torch(fam, int(batch), runs, args.warmup).items() if rt in runtimes}
        for rt, res in timed.items():
            fr["latency"].setdefault(rt, {})[batch] = res
            result["runtimes"][rt] = f"{res['version']}, options {res['options']}"
            cells = ", ".join(f"{k} {v['median_ms']:.2f} ms ({_speedup(v)})" for k, v in res["results"].items())
            print(f"  {fam.name} b{batch} {rt}: {cells}", flush=True)
    if not args.no_memory:
        fr["memory"] = measure_memory(fam, runtimes, args.threads)
    fr["provenance"].update(loadavg_end=list(os.getloadavg()), wall_s=time.perf_counter() - t0)
    return fr


def model_label(name: str, fam_result: dict) -> str:
    """The model's name as the table shows it: models timed with random weights say so in every row."""
    return f"{name} (random weights)" if fam_result.get("note", "").startswith("random weights") else name


def _fmt_mb(n: int, ref: int) -> str:
    return f"{n / 1e6:.2f} ({n / ref:.2f}x)"


def latency_rows(name: str, fam_result: dict, labels: list[str]) -> list[str]:
    rows, name = [], model_label(name, fam_result)
    for rt, per_batch in fam_result["latency"].items():
        for label in labels:
            b1, b32 = per_batch.get("1", {}).get("results", {}), per_batch.get("32", {}).get("results", {})
            cell = lambda r: f"{r[label]['median_ms']:.2f} | {_speedup(r[label])}" if label in r else "- | -"
            rows.append(f"| {name} | {label} | {rt} | {cell(b1)} | {cell(b32)} |")
    return rows


def _speedup(r: dict) -> str:
    q25, _, q75 = r["round_ratio_q25_q50_q75"]
    return f"{r['speedup']:.2f}x ({q25:.2f}-{q75:.2f})"


def storage_rows(name: str, fam_result: dict) -> list[str]:
    rows, name = [], model_label(name, fam_result)
    ref = fam_result["file_bytes"]["dense"]["dense"]
    for label, b in fam_result["file_bytes"].items():
        mem = fam_result["memory"].get(label, {})
        m = lambda k: f"{mem[k]['vmhwm_mib']:.0f} (+{mem[k]['model_mib']:.0f})" if k in mem else "-"
        rows.append(
            f"| {name} | {label} | {_fmt_mb(b['dense'], ref)} | {_fmt_mb(b['sparse_initializer'], ref)} | "
            f"{_fmt_mb(b['bitmask'], ref)} | {_fmt_mb(b['dense_zlib'], ref)} | {m('onnxruntime:dense')} | "
            f"{m('onnxruntime:sparse_initializer')} | {m('onnxruntime:bitmask')} | {m('deepsparse:dense')} |"
        )
    return rows


def verdicts(result: dict, threshold: float = 1.1) -> list[str]:
    """Per model, sparsity and batch: the runtimes where sparsity pays (>= threshold on medians, and sparse won at
    least three rounds in four), or none."""
    lines = []
    for name, fam in result["families"].items():
        for label, batch in ((label, b) for label in fam["sparsity"] if label != "dense" for b in ("1", "32")):
            results = {rt: pb.get(batch, {}).get("results", {}) for rt, pb in fam["latency"].items()}
            cells = {rt: r[label] for rt, r in results.items() if label in r}
            if not cells:
                continue
            ort = results.get("onnxruntime", {}).get("dense")

            def shown(rt: str) -> str:
                vs_ort = f" ({ort['median_ms'] / cells[rt]['median_ms']:.2f}x vs onnxruntime dense)"
                return f"**{rt} {cells[rt]['speedup']:.2f}x**" + (vs_ort if ort and rt != "onnxruntime" else "")

            pays = [rt for rt, r in cells.items() if r["speedup"] >= threshold and r["round_ratio_q25_q50_q75"][0] > 1]
            wins = sorted(pays, key=lambda rt: -cells[rt]["speedup"])
            best = max(cells, key=lambda rt: cells[rt]["speedup"])
            verdict = ", ".join(map(shown, wins)) or f"none (largest: {best} {cells[best]['speedup']:.2f}x)"
            lines.append(f"| {model_label(name, fam)} | {label} | {batch} | {verdict} |")
    return lines


def _loads(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def write_table(result: dict, path: Path) -> str:
    """Table 7 from the raw measurements (what `--render` rewrites without timing anything), written and returned."""
    p = result["provenance"]
    lines = [
        "# Table 7 (ours): latency, memory and file size of sparse models on this machine",
        "",
        "Rows marked `(random weights)` are torchvision-shaped networks with random weights and uniform random "
        "unstructured sparsity, not trained or pruned models: no accuracy is measured for them, and their "
        "sparsity pattern is not a learned one. The other rows are real sparse models (see Runs below).",
        "",
        "Speed-up = median dense time / median sparse time of the same runtime, the models' calls interleaved "
        "round by round in one process (>1: sparse is faster); in brackets the quartiles of the same-round "
        "ratios, i.e. the noise. Latency: median ms per call after warm-up.",
        "",
        "## Which runtime turns sparsity into speed",
        "",
        "A runtime counts when its speed-up over its own dense run is >= 1.10x and the sparse model won at "
        "least 3 rounds in 4. In brackets: its sparse latency against onnxruntime's dense latency (the "
        "reference point; separate processes, so not interleaved).",
        "",
        "| model | sparsity | batch | runtime that speeds up |",
        "|---|---|---:|---|",
        *verdicts(result),
        "",
        "## Latency",
        "",
        "| model | sparsity | runtime | batch 1 ms | batch 1 speed-up (quartiles) | batch 32 ms | "
        "batch 32 speed-up (quartiles) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for name, fam in result["families"].items():
        lines += latency_rows(name, fam, list(fam["sparsity"]))
    missing = (
        []
        if any("efficientnet" in n for n in result["families"])
        else ["| efficientnet_lite0 | - | - | not measured in this run: pass --records with a Lite0 run record | | | |"]
    )
    lines += [
        *missing,
        "",
        "## File size and peak memory",
        "",
        "File sizes in MB (ratio to the dense model's plain ONNX file): plain ONNX, ONNX with sparse_initializer "
        "(INT64 indices, as the ONNX checker requires), bitmask + values zip (`tasks/deploy/sparse_storage.py`), "
        "and zlib -9 of the plain file. Peak memory: VmHWM in MiB of a fresh process that loads the file and "
        "runs 5 batch-1 inferences (in brackets: growth after importing the runtime).",
        "",
        "| model | sparsity | ONNX MB | sparse_initializer MB | bitmask MB | zlib MB | ORT VmHWM (plain) | "
        "ORT VmHWM (sparse_initializer) | ORT VmHWM (bitmask) | DeepSparse VmHWM |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, fam in result["families"].items():
        lines += storage_rows(name, fam)
    lines += [m.replace("| - | - | not", "| - | not") + " | | |" for m in missing] + ["", "## Runs", ""]
    for name, fam in result["families"].items():
        sp = ", ".join(f"{k}: {v:.4f}" for k, v in fam["sparsity"].items())
        csr = next((pb["options"]["csr_weight_share"] for pb in fam["latency"].get("torch-csr", {}).values()), None)
        csr = "" if csr is None else f"; torch-csr runs {csr:.1%} of the weights (Linear, 1x1 convs) as CSR"
        diff = fam.get("onnx_max_abs_diff")
        diff = "" if not diff else f"; ONNX vs PyTorch max |diff| {max(diff.values()):.1e} (2 random inputs)"
        lines.append(f"- {name}: input {fam['shape']}, {fam['note']}; measured sparsity {sp}{csr}{diff}.")
    for rt, v in result["runtimes"].items():
        lines.append(f"- {rt}: {v.split(', options')[0] if rt == 'torch-csr' else v}")
    for rt, why in result["missing_runtimes"].items():
        lines.append(f"- {rt}: not measured: {why}")
    lines += [
        "- GPU 2:4 semi-structured sparsity: not measured (no GPU in this run).",
        "",
        "## Provenance",
        "",
        f"- command: `{p['command']}`"
        + (f" (table re-rendered from its raw file by `{result['rendered_by']}`)" if result.get("rendered_by") else ""),
        f"- git commit: {p['git_commit']}",
        f"- date: {p['created']}",
        f"- CPU: {p['cpu']['model']}, {p['cpu']['logical_cores']} logical cores, flags "
        f"{' '.join(p['cpu']['flags'])}, AMX: {'yes' if p['cpu']['amx'] else 'no'}",
        f"- threads per runtime: {p['threads']}; repetitions: batch 1 {result['runs']['1']}, batch 32 "
        f"{result['runs']['32']} after {result['warmup']} warm-up rounds",
        f"- load average (1/5/15 min) at start {_loads(p['loadavg_1_5_15'])}, at end {_loads(result['loadavg_end'])}; "
        f"wall time {result['wall_s']:.0f} s",
        *[
            f"- {name} measured in a later run merged into this table: `{fp['command']}`, git commit "
            f"{fp['git_commit']}, {fp['created']}, load average at start {_loads(fp['loadavg_1_5_15'])}, "
            f"wall time {fp['wall_s']:.0f} s"
            for name, fam in result["families"].items()
            if (fp := fam.get("provenance")) and fp.get("merged")
        ],
        "- The CPU was shared with other long jobs while this ran, so absolute latencies are inflated and "
        "noisy; the speed-ups compare calls interleaved in the same process and rounds, so drift largely "
        f"cancels. Raw numbers: `{result['raw']}`.",
    ]
    text = "\n".join(lines) + "\n"
    write_text_atomic(path, text)
    return text


def main(argv=None) -> int:
    args = parser("inference").parse_args(argv)
    if args.render:
        result = json.loads(Path(args.render).read_text())
        result["rendered_by"] = command_line()
        print(write_table(result, Path(args.table)))
        return 0
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    t0 = time.perf_counter()
    runtimes, missing = available_runtimes(args.runtimes)
    for why in missing.values():
        print(f"[missing] {why}")
    runs = {"1": args.runs_b1, "32": args.runs_b32}
    result = {"provenance": provenance(args.threads), "runs": runs, "warmup": args.warmup}
    result |= {"missing_runtimes": missing, "runtimes": {}, "families": {}}
    merging = args.merge and Path(args.raw).is_file()
    if merging:
        result = json.loads(Path(args.raw).read_text())
        result.pop("rendered_by", None)
        if (result["runs"], result["warmup"]) != (runs, args.warmup):
            print(
                f"error: --merge needs the raw file's repetitions {result['runs']}, warm-up {result['warmup']}",
                file=sys.stderr,
            )
            return 2
    work = Path(tempfile.mkdtemp(prefix="fcpts-inference-"))
    try:
        for name, fam in build_families(args).items():
            export_family(fam, work)
            result["families"][name] = measure_family(fam, runtimes, args, merging, result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not merging:  # a merge keeps the first run's provenance; families carry theirs
        result["loadavg_end"] = list(os.getloadavg())
        result["wall_s"] = time.perf_counter() - t0
        result["provenance"]["command"] = command_line()
    raw = Path(args.raw)
    result["raw"] = str(raw.relative_to(REPO_ROOT)) if raw.is_relative_to(REPO_ROOT) else str(raw)
    write_json_atomic(raw, result)
    print(write_table(result, Path(args.table)))
    print(f"table: {args.table}\nraw: {args.raw}")
    return 0
