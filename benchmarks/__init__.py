"""The suite's measurements, run through `python -m benchmarks NAME` (`--list`: what each guards). One that guards
nothing any more is retired: its output and the notebook name its commit (`git show COMMIT:benchmarks/...`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    """One measurement: the module whose `main(argv)` runs it, what it measures, and what it guards (the goal or
    the committed output that would go stale without it)."""

    module: str
    measures: str
    guards: str


BENCHMARKS: dict[str, Benchmark] = {
    "step-time": Benchmark(
        "benchmarks.speed.step_time",
        "an FCPTS step against a plain training step, side by side, one model and batch",
        "FCPTS's step at most 1.35x a plain step (results/benchmarks/step_time_*.txt)",
    ),
    "step-ops": Benchmark(
        "benchmarks.speed.step_ops",
        "the operators an FCPTS step runs against a plain step's, counted on a CPU",
        "FCPTS's extra operators not growing with the layer count (results/benchmarks/step_ops_cpu.txt)",
    ),
    "method-time": Benchmark(
        "benchmarks.speed.method_time",
        "whole runs of methods on one small model, alternated, with their ramp steps split out",
        "the method-time ratios Table 6 quotes (results/benchmarks/method_time_*.txt); with --quickstart, every "
        "method's first call on the README Quickstart within 30 s (results/benchmarks/quickstart_time_cpu.txt)",
    ),
    "pot-step-time": Benchmark(
        "benchmarks.speed.pot_step_time",
        "one POT reconstruction step: Gram gradient written down vs autograd, eager vs CUDA graph",
        "POT's per-layer step on a GPU (results/benchmarks/pot_step_time_*.txt)",
    ),
    "scale": Benchmark(
        "benchmarks.scale.scale",
        "every method on the paper's ImageNet models at 224 px, probed and projected to the paper's budget",
        "the grid's projected hours and memory (results/benchmarks/scale_*.json)",
    ),
    "gpu-check": Benchmark(
        "benchmarks.scale.gpu_check",
        "every GPU measurement the suite lacks, in one prepared call (`prepare` here, `run` there)",
        "the GPU goals: step ratios, cell times, projected grid (results/benchmarks/gpu_check_*)",
    ),
    "model-coverage": Benchmark(
        "benchmarks.code.model_coverage",
        "every registered method on common torchvision and timm models: exact target, refused, or failed",
        "that every method runs on the models users bring (results/benchmarks/model_coverage_cpu.txt)",
    ),
    "rerun-sample": Benchmark(
        "benchmarks.code.rerun_sample",
        "one committed record per method re-run with today's code: mask hash and numbers",
        "that committed records still reproduce (results/benchmarks/rerun_sample_cpu*.json)",
    ),
    "code-shape": Benchmark(
        "benchmarks.code.shape",
        "lines per folder, files, entry points, mypy's coverage, docs' lines, the suite's time per directory",
        "the size budget of the code and the notebook (results/benchmarks/code_shape.txt)",
    ),
    "inference": Benchmark(
        "benchmarks.inference.inference",
        "latency, memory and file size of sparse models in each runtime, against dense (Table 7)",
        "results/tables/table7_inference.md",
    ),
}
