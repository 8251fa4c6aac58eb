"""The suite's measurements, run through `python -m benchmarks NAME` (`--list`: what each guards). One that guards
nothing any more is retired: its output and the notebook name its commit (`git show COMMIT:benchmarks/...`).
Each one's flags are declared here, without torch, so `--help` and bad flags answer before its module is imported."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tasks.deploy.driver import DEPLOY_DIR
from tasks.grid.help import add_device, at_least, command_parser, module_docstring
from tasks.grid.paths import REPO_ROOT, RESULTS_DIR, resolve_data_root


@dataclass(frozen=True)
class Benchmark:
    """One measurement: the module whose `main(argv)` runs it, what it measures, what it guards (the goal or the
    committed output that would go stale without it), and the function that adds its flags."""

    module: str
    measures: str
    guards: str
    arguments: Callable[[argparse.ArgumentParser], None]


def parser(name: str) -> argparse.ArgumentParser:
    """`python -m benchmarks NAME`'s parser: its module's docstring (read, not imported) as help, its flags."""
    p = command_parser(f"python -m benchmarks {name}", module_docstring(BENCHMARKS[name].module))
    BENCHMARKS[name].arguments(p)
    return p


def method_name(name: str) -> str:
    """A `--methods` value: a registered method (the registry is imported only when the flag is given)."""
    from fcpts.methods import get_method

    try:
        get_method(name)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return name


def add_out(p: argparse.ArgumentParser, flag: str = "--out") -> None:
    p.add_argument(flag, help="also write the output (with its provenance) to this file")


def step_time(p: argparse.ArgumentParser) -> None:
    add_out(p)
    add_device(p)
    p.add_argument("--model", default="resnet56")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10, help="timed step pairs per round and configuration")
    p.add_argument("--rounds", type=int, default=3, help="FCPTS runs per configuration, interleaved")
    p.add_argument("--amp", choices=["bf16"], help="also time FCPTS with this training precision")


def step_ops(p: argparse.ArgumentParser) -> None:
    add_out(p)
    p.add_argument("--model", default="resnet56")
    p.add_argument("--batch-size", type=int, default=2, help="does not change the count; small is quick")
    p.add_argument("--steps", type=int, default=2)


def pot_step_time(p: argparse.ArgumentParser) -> None:
    add_out(p)
    add_device(p)
    p.add_argument("--model", default="resnet32", help="a CIFAR ResNet (32 px) or an ImageNet architecture (224 px)")
    p.add_argument("--layers", default="layer1.", help="the layers whose names start with this are reconstructed")
    p.add_argument("--images", type=at_least(int, 64), default=512, help="at least 64 (one batch)")
    p.add_argument(
        "--steps", type=at_least(int, 1), default=500, help="the shorter run's steps (the longer runs twice as many)"
    )
    p.add_argument("--rounds", type=at_least(int, 1), default=3)


def scale(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="JSON output (default results/benchmarks/scale_<device>[_small].json); .md beside it")
    p.add_argument("--models", nargs="+", help="default: the paper's seven (tasks/imagenet/models.py)")
    p.add_argument("--methods", nargs="+", type=method_name, help="default: every registered method")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--small", action="store_true", help="tiny probes (a couple of images and steps) for a CPU")
    p.add_argument("--cell-timeout", type=float, default=600.0, help="seconds one cell may take")
    p.add_argument("--budget-s", type=float, help="start no cell after this many seconds (the rest: 'skipped')")
    p.add_argument("--threads", type=int, help="torch threads a cell (default: torch's)")
    p.add_argument("--note", default="", help="a line printed with the table (e.g. the machine's load)")
    p.add_argument("--paper-grid", action="store_true", help="the pairs of the paper's ImageNet tables, kept cells too")
    p.add_argument("--resume", action="store_true", help="keep the finished cells of an earlier --out (same probes)")
    p.add_argument("--merge", nargs="+", default=[], help="also keep these outputs' finished cells, as --resume")
    p.add_argument(
        "--again", nargs="+", type=method_name, default=[], metavar="METHOD", help="measure these again, --merge or not"
    )
    p.add_argument("--merge-only", action="store_true", help="measure nothing: the table of --resume/--merge cells")
    p.add_argument("--reproject", action="store_true", help="measure nothing: --out projected anew by this code")


GPU_DATA = REPO_ROOT / "gpu_data"


def gpu_check(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("prepare", help="copy the CIFAR-10 subset and weights the check needs into gpu_data/")
    pr.add_argument("--source", default=str(resolve_data_root(must_exist=False)))
    pr.add_argument("--dest", default=str(GPU_DATA))
    pr.add_argument("--train", type=int, default=2000, help="training images (calibration; POT takes them all)")
    pr.add_argument("--test", type=int, default=2000, help="test images (evaluation)")
    rn = sub.add_parser("run", help="run every part")
    rn.add_argument("--out", required=True, help="everything goes under this folder (on the device: $OUT)")
    rn.add_argument("--data-root", default=str(GPU_DATA))
    rn.add_argument("--device", help="default: cuda, cpu for --dry-run")
    rn.add_argument("--total-s", type=float, help="time for all parts (default 465; dry run 1500: a bound on a hang)")
    rn.add_argument("--dry-run", action="store_true", help="tiny sizes on a CPU: checks the plumbing, measures nothing")
    rn.add_argument("--only", nargs="+", help="run only these parts")
    rn.add_argument("--continue-from", help="an earlier call's gpu_check.tar.gz (in gpu_data/) or OUT/work: finish it")


def code_shape(p: argparse.ArgumentParser) -> None:
    add_out(p, "--output")
    p.add_argument("--root", type=Path, default=REPO_ROOT, help="the checkout to measure (default: this one)")
    p.add_argument("--suite", nargs="*", default=[], metavar="NAME=LOG", help="pytest logs to read wall times from")


LITE0_RECORDS = [  # real sparse models of grid cells: EfficientNet-Lite0
    REPO_ROOT / "results/runs/imagenet/imagenet-val1300/efficientnet_lite0" / f"fcpts-sp{s}-cpu-seed0.json"
    for s in (50, 60, 70)
]
RUNTIMES = ["onnxruntime", "deepsparse", "openvino", "torch", "torch-csr"]


def inference(p: argparse.ArgumentParser) -> None:
    p.add_argument("--families", nargs="+", default=["resnet18", "mobilenet_v2", "cifar", "records"])
    p.add_argument("--sparsity", nargs="+", type=float, default=[0.5, 0.6, 0.7, 0.9], help="rates of random models")
    p.add_argument("--runtimes", nargs="+", default=RUNTIMES)
    p.add_argument("--cifar-checkpoint", default=str(DEPLOY_DIR / "cifar10-resnet56-fcpts-sp90-fast-seed0.pt"))
    p.add_argument("--records", nargs="+", default=[str(r) for r in LITE0_RECORDS], help="family 'records'")
    p.add_argument("--merge", action="store_true", help="keep the raw file's other families; measure only --families")
    p.add_argument("--data-root")
    p.add_argument("--size", type=int, default=224, help="input size of the ImageNet-shaped models")
    p.add_argument("--runs-b1", type=int, default=30)
    p.add_argument("--runs-b32", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--table", default=str(RESULTS_DIR / "tables" / "table7_inference.md"))
    p.add_argument("--raw", default=str(DEPLOY_DIR / "table7_inference.json"))
    p.add_argument("--render", metavar="RAW_JSON", help="measure nothing: rewrite the table from a raw file")


BENCHMARKS: dict[str, Benchmark] = {
    "step-time": Benchmark(
        "benchmarks.speed.step_time",
        "an FCPTS step against a plain training step, side by side, one model and batch",
        "FCPTS's step at most 1.35x a plain step (results/benchmarks/step_time_*.txt)",
        step_time,
    ),
    "step-ops": Benchmark(
        "benchmarks.speed.step_ops",
        "the operators an FCPTS step runs against a plain step's, counted on a CPU",
        "FCPTS's extra operators not growing with the layer count (results/benchmarks/step_ops_cpu.txt)",
        step_ops,
    ),
    "pot-step-time": Benchmark(
        "benchmarks.speed.pot_step_time",
        "one POT reconstruction step: Gram gradient written down vs autograd, eager vs CUDA graph",
        "POT's per-layer step on a GPU (results/benchmarks/pot_step_time_*.txt)",
        pot_step_time,
    ),
    "scale": Benchmark(
        "benchmarks.scale.scale",
        "every method on the paper's ImageNet models at 224 px, probed and projected to the paper's budget",
        "the grid's projected hours and memory (results/benchmarks/scale_*.json)",
        scale,
    ),
    "gpu-check": Benchmark(
        "benchmarks.scale.gpu_check",
        "every GPU measurement the suite lacks, in one prepared call (`prepare` here, `run` there)",
        "the GPU goals: step ratios, cell times, projected grid (results/benchmarks/gpu_check_*)",
        gpu_check,
    ),
    "code-shape": Benchmark(
        "benchmarks.code.shape",
        "lines per folder, files, entry points, mypy's coverage, docs' lines, the suite's time per directory",
        "the size budget of the code and the notebook (results/benchmarks/code_shape.txt)",
        code_shape,
    ),
    "inference": Benchmark(
        "benchmarks.inference.inference",
        "latency, memory and file size of sparse models in each runtime, against dense (Table 7)",
        "results/tables/table7_inference.md",
        inference,
    ),
}
