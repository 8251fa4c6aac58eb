"""Table 7 from the raw measurements (`--render` rewrites it without timing anything)."""

from __future__ import annotations

from pathlib import Path

from fcpts.core.io import write_text_atomic


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


def write_table(result: dict, path: Path) -> None:
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
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "\n".join(lines) + "\n")
