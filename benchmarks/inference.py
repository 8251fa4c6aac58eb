"""Benchmark: does unstructured sparsity buy latency, memory or file size on this machine? (Table 7)

Every runtime is timed against its own dense model in the same process, dense and sparse calls
interleaved round by round (order rotated) so drift of a shared CPU hits both alike; each latency is a
median after warm-up, each speed-up median dense time / median sparse time, printed with the quartiles
of the same-round ratios (the noise).

Models: ResNet-18- and MobileNetV2-shaped torchvision networks with random weights (latency does not
depend on the values) and uniform random unstructured sparsity at exactly the given rate in every
Conv2d/Linear, including the first conv, depthwise convs and the classifier; the real FCPTS CIFAR-10
ResNet-56 at 90% (a checkpoint from `python -m tasks.deploy --record ...`) against its dense weights.
BatchNorm is folded and models are exported to ONNX opset 17 as in `tasks.deploy`.

Runtimes: onnxruntime (the dense reference point), DeepSparse and OpenVINO through `tasks.deploy`'s
worker in their own virtual environments (missing ones are reported, not fatal), torch eager (oneDNN)
and torch with CSR sparse matmul for Linear and 1x1 Conv2d (the layers where a sparse GEMM applies
without im2col; 3x3 and depthwise convs stay dense).

    python -m benchmarks.inference                       # writes results/tables/table7_inference.md
    python -m benchmarks.inference --quick               # smoke run, tiny shapes, few repetitions
"""
from __future__ import annotations

import argparse
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

import torch
from torch import nn

from fcpts.core.masks import prunable_layers, sparsity_summary
from tasks.deploy.export import export_onnx, inference_copy, max_abs_diff, ort_session
from tasks.grid.records import command_line
from fcpts.core.io import write_json_atomic
from tasks.deploy.checkpoints import load_sparse_checkpoint
from tasks.deploy.driver import DEPLOY_DIR, provenance
from tasks.deploy.runtimes import RuntimeNotInstalled, peak_memory, run_worker, runtime_version
from tasks.deploy.sparse_storage import write_sparse_files, zlib_size
from tasks.deploy.worker import time_interleaved
from tasks.grid.paths import REPO_ROOT

TABLE = REPO_ROOT / "results" / "tables" / "table7_inference.md"
RAW = DEPLOY_DIR / "table7_inference.json"
CIFAR_CHECKPOINT = DEPLOY_DIR / "cifar10-resnet56-fcpts-sp90-fast-seed0.pt"
# Real sparse models from grid cells (their saved state dicts): the EfficientNet-Lite0 substitute
DEFAULT_RECORDS = [REPO_ROOT / "results/runs/imagenet/imagenet-val1300/efficientnet_lite0" / f
                   for f in ("fcpts-sp50-cpu-seed0.json", "fcpts-sp60-cpu-seed0.json", "fcpts-sp70-cpu-seed0.json")]
EXTERNAL = ["onnxruntime", "deepsparse", "openvino"]
TORCH_RUNTIMES = ["torch", "torch-csr"]


# ----------------------------------------------------------------------------- torch CSR kernels


class CSRLinear(nn.Module):
    """y = x W^T + b with W as a CSR matrix (torch.sparse, MKL on CPU)."""

    def __init__(self, layer: nn.Linear):
        super().__init__()
        self.weight = layer.weight.detach().to_sparse_csr()
        self.bias = None if layer.bias is None else layer.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (self.weight @ x.t()).t()
        return y if self.bias is None else y + self.bias


class CSRConv1x1(nn.Module):
    """A 1x1, ungrouped, unpadded conv as CSR W (out, in) @ X (in, N*H*W)."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        self.stride = conv.stride
        self.weight = conv.weight.detach().flatten(1).to_sparse_csr()
        self.bias = None if conv.bias is None else conv.bias.detach().view(1, -1, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride[0], :: self.stride[1]]
        n, c, h, w = x.shape
        y = (self.weight @ x.transpose(0, 1).reshape(c, n * h * w)).view(-1, n, h, w).transpose(0, 1)
        return y if self.bias is None else y + self.bias


def csr_applies(m: nn.Module) -> bool:
    return isinstance(m, nn.Linear) or (isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1) and m.groups == 1
                                        and m.padding == (0, 0) and m.dilation == (1, 1))


def to_torch_csr(model: nn.Module) -> tuple[nn.Module, int]:
    """A copy with every Linear and plain 1x1 Conv2d on CSR weights; also the share of weights moved."""
    import copy

    model = copy.deepcopy(model)
    moved = total = 0
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    for name, m in list(prunable_layers(model).items()):
        total += m.weight.numel()
        if not csr_applies(m):
            continue
        moved += m.weight.numel()
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr,
                CSRLinear(m) if isinstance(m, nn.Linear) else CSRConv1x1(m))
    return model, moved / total


# ----------------------------------------------------------------------------- models


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


@torch.no_grad()
def random_unstructured(model: nn.Module, rate: float, seed: int) -> nn.Module:
    """Zero exactly round(rate * n) randomly chosen weights in every Conv2d/Linear (in place)."""
    g = torch.Generator().manual_seed(seed)
    for layer in prunable_layers(model).values():
        w = layer.weight.view(-1)
        w[torch.randperm(w.numel(), generator=g)[: round(rate * w.numel())]] = 0.0
    return model


def random_family(name: str, sparsities: list[float], size: int, seed: int) -> Family:
    import torchvision

    builder = {"resnet18": torchvision.models.resnet18, "mobilenet_v2": torchvision.models.mobilenet_v2}[name]
    torch.manual_seed(seed)
    dense = inference_copy(builder(weights=None, num_classes=1000))
    fam = Family(name, (3, size, size), "random weights, uniform random unstructured sparsity in every conv/linear")
    for s in [0.0, *sparsities]:
        m = random_unstructured(inference_copy(dense), s, seed + 1) if s else dense
        fam.models[_label(s)], fam.sparsity[_label(s)] = m, sparsity_summary(m)[0]
    return fam


def cifar_family(checkpoint: Path, data_root: str | None) -> Family:
    """The real sparse CIFAR model of a deploy checkpoint beside the dense weights it started from."""
    from tasks.grid.data import resolve_data_root
    from tasks.cifar.models import cifar_resnet, default_cifar_weights, load_checkpoint

    sparse, meta = load_sparse_checkpoint(checkpoint, None, None)
    dense = cifar_resnet(meta["model"])
    load_checkpoint(dense, default_cifar_weights(resolve_data_root(data_root), meta["dataset"], meta["model"]))
    fam = Family(f"cifar10-{meta['model']}", (3, 32, 32), f"real weights: FCPTS sparse model {checkpoint.name}")
    for m in (dense, sparse):
        s = sparsity_summary(m)[0]
        fam.models[_label(s)], fam.sparsity[_label(s)] = inference_copy(m), s
    return fam


def record_families(paths: list[Path]) -> list[Family]:
    """Real sparse models of run records (their saved state dicts), one family per task/dataset/model,
    each with the dense weights the records started from."""
    from tasks.grid.data import DataNotFoundError
    from tasks.deploy.saved_models import models_from_record

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
            fams[key].models["dense"], fams[key].sparsity["dense"] = inference_copy(dense), sparsity_summary(dense)[0]
        s = sparsity_summary(sparse)[0]
        m = rec["metrics"]
        fams[key].note += (f"; {_label(s)}: {rec['method']} run record {Path(path).name} (top-1 {m['top1']:.2f} on "
                           f"{m['n_images']} {rec['dataset']} images, dense {rec['dense_metrics']['top1']:.2f})")
        fams[key].models[_label(s)], fams[key].sparsity[_label(s)] = inference_copy(sparse), s
    return list(fams.values())


def _label(s: float) -> str:
    return "dense" if s < 0.005 else f"{s:.0%}"


def export_family(fam: Family, work: Path) -> None:
    for label, m in fam.models.items():
        path = work / f"{fam.name}-{label.rstrip('%')}.onnx"
        data = export_onnx(m, path, fam.shape)
        fam.files[label] = write_sparse_files(path)
        x = torch.randn(2, *fam.shape, generator=torch.Generator().manual_seed(0))
        fam.onnx_max_abs_diff[label] = max_abs_diff(m, ort_session(data), x)


# ----------------------------------------------------------------------------- measuring


def speedups(times: dict, dense) -> dict:
    """Per model: median latency (ms), speed-up = median dense time / median sparse time over the same
    interleaved rounds, and the quartiles of the same-round ratios (their spread is the noise: on a
    busy CPU single rounds swing by 2x when another job lands on the core). Raw times are kept."""
    out = {}
    for k, v in times.items():
        q = statistics.quantiles([d / t for d, t in zip(times[dense], v)], n=4) if len(v) > 1 else [1.0] * 3
        out[k] = {"median_ms": 1e3 * statistics.median(v), "runs": len(v),
                  "speedup": statistics.median(times[dense]) / statistics.median(v),
                  "round_ratio_q25_q50_q75": q, "times_ms": [round(1e3 * t, 4) for t in v]}
    return out


def time_external(runtime: str, fam: Family, batch: int, runs: int, warmup: int, threads: int) -> dict:
    files = [str(fam.files[k]["dense"]) for k in fam.models]
    r = run_worker(runtime, ["--models", *files, "--shape", *map(str, fam.shape), "--batch", str(batch),
                             "--runs", str(runs), "--warmup", str(warmup)], threads)
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
    times = time_interleaved(runners, x, warmup, runs)
    out = {"torch": {}, "torch-csr": {}}
    for (rt, label), res in speedups(times, ("torch", "dense")).items():
        out[rt][label] = res
    out["torch-csr"]["dense"] = out["torch"]["dense"]  # CSR's own dense reference: dense kernels
    return {"torch": {"version": torch.__version__, "options": {}, "results": out["torch"]},
            "torch-csr": {"version": torch.__version__, "options": {"csr_weight_share": moved},
                          "results": out["torch-csr"]}}


def measure_memory(fam: Family, runtimes: list[str], threads: int) -> dict:
    """VmHWM of a fresh process per file: onnxruntime for each storage format, DeepSparse for the plain file."""
    mem = {}
    for label, files in fam.files.items():
        mem[label] = {f"onnxruntime:{kind}": peak_memory("onnxruntime", p, fam.shape, threads)
                      for kind, p in files.items()}
        if "deepsparse" in runtimes:
            mem[label]["deepsparse:dense"] = peak_memory("deepsparse", files["dense"], fam.shape, threads)
    return mem


def file_bytes(fam: Family) -> dict:
    return {label: {**{k: p.stat().st_size for k, p in files.items()}, "dense_zlib": zlib_size(files["dense"])}
            for label, files in fam.files.items()}


def available_runtimes(wanted: list[str]) -> tuple[list[str], dict[str, str]]:
    """The runtimes that import, and for the others the reason with install instructions."""
    ok, missing = [], {}
    for rt in wanted:
        if rt in TORCH_RUNTIMES:
            ok.append(rt)
            continue
        try:
            runtime_version(rt)
            ok.append(rt)
        except RuntimeNotInstalled as e:
            missing[rt] = str(e)
    return ok, missing


# ----------------------------------------------------------------------------- report


def _fmt_mb(n: int, ref: int) -> str:
    return f"{n / 1e6:.2f} ({n / ref:.2f}x)"


def latency_rows(name: str, fam_result: dict, labels: list[str]) -> list[str]:
    rows = []
    for rt, per_batch in fam_result["latency"].items():
        for label in labels:
            b1, b32 = per_batch.get("1", {}).get("results", {}), per_batch.get("32", {}).get("results", {})
            cell = lambda r: (f"{r[label]['median_ms']:.2f} | {_speedup(r[label])}" if label in r else "- | -")  # noqa: E731
            rows.append(f"| {name} | {label} | {rt} | {cell(b1)} | {cell(b32)} |")
    return rows


def _speedup(r: dict) -> str:
    q25, _, q75 = r["round_ratio_q25_q50_q75"]
    return f"{r['speedup']:.2f}x ({q25:.2f}-{q75:.2f})"


def faster(r: dict, threshold: float) -> bool:
    """Sparsity pays: >= threshold on medians, and sparse won at least three rounds in four."""
    return r["speedup"] >= threshold and r["round_ratio_q25_q50_q75"][0] > 1.0


def storage_rows(name: str, fam_result: dict) -> list[str]:
    rows = []
    ref = fam_result["file_bytes"]["dense"]["dense"]
    for label, b in fam_result["file_bytes"].items():
        mem = fam_result["memory"].get(label, {})
        m = lambda k: f"{mem[k]['vmhwm_mib']:.0f} (+{mem[k]['model_mib']:.0f})" if k in mem else "-"  # noqa: E731
        rows.append(f"| {name} | {label} | {_fmt_mb(b['dense'], ref)} | {_fmt_mb(b['sparse_initializer'], ref)} | "
                    f"{_fmt_mb(b['bitmask'], ref)} | {_fmt_mb(b['dense_zlib'], ref)} | {m('onnxruntime:dense')} | "
                    f"{m('onnxruntime:sparse_initializer')} | {m('onnxruntime:bitmask')} | {m('deepsparse:dense')} |")
    return rows


def verdicts(result: dict, threshold: float = 1.1) -> list[str]:
    """Per model, sparsity and batch: the runtimes where sparsity pays (see `faster`), or none."""
    lines = []
    for name, fam in result["families"].items():
        for label in fam["sparsity"]:
            if label == "dense":
                continue
            for batch in ("1", "32"):
                cells = {rt: pb[batch]["results"][label] for rt, pb in fam["latency"].items()
                         if batch in pb and label in pb[batch]["results"]}
                if not cells:
                    continue
                wins = sorted((rt for rt in cells if faster(cells[rt], threshold)), key=lambda rt: -cells[rt]["speedup"])
                best = max(cells, key=lambda rt: cells[rt]["speedup"])
                ort = fam["latency"].get("onnxruntime", {}).get(batch, {}).get("results", {}).get("dense")
                vs_ort = lambda rt: (f" ({ort['median_ms'] / cells[rt]['median_ms']:.2f}x vs onnxruntime dense)"  # noqa: E731
                                     if ort and rt != "onnxruntime" else "")
                verdict = (", ".join(f"**{rt} {cells[rt]['speedup']:.2f}x**{vs_ort(rt)}" for rt in wins) if wins
                           else f"none (largest: {best} {cells[best]['speedup']:.2f}x)")
                lines.append(f"| {name} | {label} | {batch} | {verdict} |")
    return lines


def _loads(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def write_table(result: dict, path: Path) -> None:
    p = result["provenance"]
    lines = ["# Table 7 (ours): latency, memory and file size of sparse models on this machine", "",
             "Speed-up = median dense time / median sparse time of the same runtime, the models' calls interleaved "
             "round by round in one process (>1: sparse is faster); in brackets the quartiles of the same-round "
             "ratios, i.e. the noise. Latency: median ms per call after warm-up.", "",
             "## Which runtime turns sparsity into speed", "",
             "A runtime counts when its speed-up over its own dense run is >= 1.10x and the sparse model won at "
             "least 3 rounds in 4. In brackets: its sparse latency against onnxruntime's dense latency (the "
             "reference point; separate processes, so not interleaved).", "",
             "| model | sparsity | batch | runtime that speeds up |", "|---|---|---:|---|",
             *verdicts(result), "",
             "## Latency", "",
             "| model | sparsity | runtime | batch 1 ms | batch 1 speed-up (quartiles) | batch 32 ms | "
             "batch 32 speed-up (quartiles) |",
             "|---|---|---|---:|---:|---:|---:|"]
    for name, fam in result["families"].items():
        lines += latency_rows(name, fam, list(fam["sparsity"]))
    missing = [] if any("efficientnet" in n for n in result["families"]) else [
        "| efficientnet_lite0 | - | - | not measured in this run: pass --records with a Lite0 run record | | | |"]
    lines += [*missing, "",
              "## File size and peak memory", "",
              "File sizes in MB (ratio to the dense model's plain ONNX file): plain ONNX, ONNX with sparse_initializer "
              "(INT64 indices, as the ONNX checker requires), bitmask + values zip (`tasks/sparse_storage.py`), "
              "and zlib -9 of the plain file. Peak memory: VmHWM in MiB of a fresh process that loads the file and "
              "runs 5 batch-1 inferences (in brackets: growth after importing the runtime).", "",
              "| model | sparsity | ONNX MB | sparse_initializer MB | bitmask MB | zlib MB | ORT VmHWM (plain) | "
              "ORT VmHWM (sparse_initializer) | ORT VmHWM (bitmask) | DeepSparse VmHWM |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
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
    lines += ["- GPU 2:4 semi-structured sparsity: not measured (no GPU in this run).", "",
              "## Provenance", "",
              f"- command: `{p['command']}`" + (f" (table re-rendered from its raw file by `{result['rendered_by']}`)"
                                                if result.get("rendered_by") else ""), f"- git commit: {p['git_commit']}", f"- date: {p['created']}",
              f"- CPU: {p['cpu']['model']}, {p['cpu']['logical_cores']} logical cores, flags "
              f"{' '.join(p['cpu']['flags'])}, AMX: {'yes' if p['cpu']['amx'] else 'no'}",
              f"- threads per runtime: {p['threads']}; repetitions: batch 1 {result['runs']['1']}, batch 32 "
              f"{result['runs']['32']} after {result['warmup']} warm-up rounds",
              f"- load average (1/5/15 min) at start {_loads(p['loadavg_1_5_15'])}, at end {_loads(result['loadavg_end'])}; "
              f"wall time {result['wall_s']:.0f} s",
              *[f"- {name} measured in a later run merged into this table: `{fp['command']}`, git commit "
                f"{fp['git_commit']}, {fp['created']}, load average at start {_loads(fp['loadavg_1_5_15'])}, "
                f"wall time {fp['wall_s']:.0f} s" for name, fam in result["families"].items()
                if (fp := fam.get("provenance")) and fp.get("merged")],
              "- The CPU was shared with other long jobs while this ran, so absolute latencies are inflated and "
              "noisy; the speed-ups compare calls interleaved in the same process and rounds, so drift largely "
              f"cancels. Raw numbers: `{result['raw']}`."]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.inference", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=["resnet18", "mobilenet_v2", "cifar", "records"])
    p.add_argument("--sparsity", nargs="+", type=float, default=[0.5, 0.6, 0.7, 0.9],
                   help="rates for the random-weight models (Table 7 has 50/60/70%%; 90%% is where sparse kernels start to pay)")
    p.add_argument("--runtimes", nargs="+", default=EXTERNAL + TORCH_RUNTIMES)
    p.add_argument("--cifar-checkpoint", default=str(CIFAR_CHECKPOINT))
    p.add_argument("--records", nargs="+", default=[str(r) for r in DEFAULT_RECORDS],
                   help="run records whose saved sparse models join the table (family 'records')")
    p.add_argument("--merge", action="store_true",
                   help="keep the other families of the existing raw file; re-measure only --families")
    p.add_argument("--data-root")
    p.add_argument("--size", type=int, default=224, help="input size of the ImageNet-shaped models")
    p.add_argument("--runs-b1", type=int, default=30)
    p.add_argument("--runs-b32", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--quick", action="store_true", help="smoke run: 64x64 inputs, 3 runs, table to a temp dir")
    p.add_argument("--table", default=str(TABLE))
    p.add_argument("--raw", default=str(RAW))
    p.add_argument("--render", metavar="RAW_JSON", help="measure nothing: rewrite the table from a raw file")
    return p.parse_args(argv)


def build_families(args) -> dict[str, Family]:
    fams = {}
    for name in args.families:
        if name == "cifar":
            ckpt = Path(args.cifar_checkpoint)
            if not ckpt.is_file():
                print(f"[skip] cifar: no sparse checkpoint at {ckpt}; make one with "
                      "python -m tasks.deploy --record results/runs/cifar/cifar10/resnet56/fcpts-sp90-fast-seed0.json")
                continue
            fam = cifar_family(ckpt, args.data_root)
        elif name == "records":
            for fam in record_families([Path(r) for r in args.records]):
                fams[fam.name] = fam
            continue
        else:
            fam = random_family(name, args.sparsity, args.size, seed=0)
        fams[fam.name] = fam
    return fams


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.render:
        result = json.loads(Path(args.render).read_text())
        result["rendered_by"] = command_line()
        write_table(result, Path(args.table))
        print(Path(args.table).read_text())
        return 0
    if args.quick:
        args.size, args.runs_b1, args.runs_b32, args.warmup = 64, 3, 3, 1
        quick_dir = Path(tempfile.mkdtemp(prefix="fcpts-inference-quick-"))
        args.table, args.raw = str(quick_dir / "table7.md"), str(quick_dir / "table7.json")
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    prov = provenance(args.threads)
    t0 = time.perf_counter()
    runtimes, missing = available_runtimes(args.runtimes)
    for rt, why in missing.items():
        print(f"[missing] {why}")
    work = Path(tempfile.mkdtemp(prefix="fcpts-inference-"))
    result = {"provenance": prov, "runs": {"1": args.runs_b1, "32": args.runs_b32}, "warmup": args.warmup,
              "missing_runtimes": missing, "runtimes": {}, "families": {}}
    merging = args.merge and Path(args.raw).is_file()
    if merging:
        result = json.loads(Path(args.raw).read_text())
        result.pop("rendered_by", None)
        if (result["runs"], result["warmup"]) != ({"1": args.runs_b1, "32": args.runs_b32}, args.warmup):
            print(f"error: --merge needs the raw file's repetitions {result['runs']}, warm-up {result['warmup']}",
                  file=sys.stderr)
            return 2
    try:
        for name, fam in build_families(args).items():
            export_family(fam, work)
            fam_t0 = time.perf_counter()
            fr = {"shape": list(fam.shape), "note": fam.note, "sparsity": fam.sparsity, "latency": {},
                  "file_bytes": file_bytes(fam), "memory": {}, "onnx_max_abs_diff": fam.onnx_max_abs_diff,
                  "provenance": {**provenance(args.threads), "command": command_line(), "merged": merging}}
            for batch, runs in (("1", args.runs_b1), ("32", args.runs_b32)):
                for rt in [r for r in runtimes if r in EXTERNAL]:
                    print(f"[time] {name} batch {batch} {rt}", flush=True)
                    res = time_external(rt, fam, int(batch), runs, args.warmup, args.threads)
                    fr["latency"].setdefault(rt, {})[batch] = res
                    result["runtimes"][rt] = f"{res['version']}, options {res['options']}"
                if "torch" in runtimes or "torch-csr" in runtimes:
                    print(f"[time] {name} batch {batch} torch, torch-csr", flush=True)
                    for rt, res in time_torch(fam, int(batch), runs, args.warmup).items():
                        if rt in runtimes:
                            fr["latency"].setdefault(rt, {})[batch] = res
                            result["runtimes"][rt] = f"{res['version']}, options {res['options']}"
                _print_progress(name, fr, batch)
            if not args.no_memory:
                print(f"[memory] {name}", flush=True)
                fr["memory"] = measure_memory(fam, runtimes, args.threads)
            fr["provenance"].update(loadavg_end=list(os.getloadavg()), wall_s=time.perf_counter() - fam_t0)
            result["families"][name] = fr
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not merging:  # a merge keeps the first run's provenance; families carry theirs
        result["loadavg_end"] = list(os.getloadavg())
        result["wall_s"] = time.perf_counter() - t0
        result["provenance"]["command"] = command_line()
    raw = Path(args.raw)
    result["raw"] = str(raw.relative_to(REPO_ROOT)) if raw.is_relative_to(REPO_ROOT) else str(raw)
    write_json_atomic(Path(args.raw), result)
    write_table(result, Path(args.table))
    print(Path(args.table).read_text())
    print(f"table: {args.table}\nraw: {args.raw}")
    return 0


def _print_progress(name: str, fr: dict, batch: str) -> None:
    for rt, pb in fr["latency"].items():
        if batch in pb:
            cells = ", ".join(f"{k} {v['median_ms']:.2f} ms ({_speedup(v)})" for k, v in pb[batch]["results"].items())
            print(f"  {name} b{batch} {rt}: {cells}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
