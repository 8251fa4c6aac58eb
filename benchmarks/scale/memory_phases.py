"""Benchmark: where a training method's host memory goes, phase by phase, in copies of the model's weights.

The scale benchmark measures one peak per cell; docs/memory.md states each method's peak as a formula. This runs
one method once on one model (random weights from the ImageNet catalogue, synthetic 224-px images, a couple of
steps at batch 1) and marks the phases of its run where it enters and leaves the functions named in `PHASES`
(FCPTS's: the teacher's copy, the thresholds, the training loop, the exact step; ProbMask's: the teacher's copy, the
loop, the export). A phase's highest resident set is the kernel's high-water mark, reset at each mark, where Linux
offers it, else sampled every 10 ms. Each line: the phase, the resident set at its end and the highest within it,
in GB and in units of 4P (one float32 copy of every parameter), so a term of the formula reads off as a step
between lines.

glibc keeps freed large blocks in the process (its mmap threshold grows after each free), so the resident set
overstates what is live; `MALLOC_MMAP_THRESHOLD_=1048576` in the environment fixes the threshold and the resident set
follows the tensors. Each output names the setting it ran with.

    MALLOC_MMAP_THRESHOLD_=1048576 OMP_NUM_THREADS=1 python -m benchmarks.scale.memory_phases --model vit_base \
        --method fcpts --output results/benchmarks/memory_phases_vit_base_fcpts.txt
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from benchmarks.report import emit, text_parser
from benchmarks.scale.scale_cell import PeakRSS, SyntheticImages
from fcpts.methods import get_method

# The functions whose calls mark a phase, per method (module, attribute): those a run calls once each, in order.
PHASES = {
    "fcpts": (
        ("fcpts.methods.fcpts", "frozen_teacher"),
        ("fcpts.methods.fcpts", "_Thresholds"),
        ("fcpts.methods.fcpts", "train_loop"),
        ("fcpts.methods.fcpts", "_exact_step"),
    ),
    "probmask": (
        ("baselines.probmask", "frozen_teacher"),
        ("baselines.probmask", "train_loop"),
        ("baselines.probmask", "export_masks"),
    ),
}


class PhaseLog:
    """One `PeakRSS` per phase; `mark(name)` closes the current phase and opens `name`."""

    def __init__(self, every_s: float = 0.01):
        self.rows: list[tuple[str, int, int]] = []  # (phase, resident at its end, highest within it)
        self.every_s = every_s
        self.phase, self._rss = "start", PeakRSS(every_s).__enter__()

    def _end_phase(self) -> None:
        self._rss.__exit__(None, None, None)
        now = PeakRSS.now()
        self.rows.append((self.phase, now, max(self._rss.peak, now)))

    def mark(self, name: str) -> None:
        self._end_phase()
        self.phase, self._rss = name, PeakRSS(self.every_s).__enter__()

    def close(self) -> None:
        self._end_phase()  # the last phase's row; no new phase (and sampler) opened only to be closed


@contextmanager
def marked(log: PhaseLog, phases: tuple[tuple[str, str], ...]) -> Iterator[None]:
    """Each named function marks the log where it is entered and left, while the block runs."""
    import importlib

    originals = []
    for module_name, attr in phases:
        module = importlib.import_module(module_name)
        original = getattr(module, attr)

        def wrapper(*args, _original=original, _attr=attr, **kwargs):
            log.mark(_attr)
            try:
                return _original(*args, **kwargs)
            finally:
                log.mark(f"after {_attr}")

        setattr(module, attr, functools.wraps(original)(wrapper))
        originals.append((module, attr, original))
    try:
        yield
    finally:
        for module, attr, original in originals:
            setattr(module, attr, original)


def measure(model_name: str, method_name: str, images: int = 4, iterations: int = 2) -> list[str]:
    """The phase lines of one run."""
    from tasks.imagenet.models import architecture

    torch.manual_seed(0)
    log = PhaseLog()
    log.mark("build the model")
    model = architecture(model_name)
    params = sum(p.numel() for p in model.parameters())
    method = get_method(method_name)
    options = method.make_options({"iterations": iterations, "batch_size": 1, "seed": 0}, {"progress": False})
    log.mark("run: setup")
    t = time.perf_counter()
    with marked(log, PHASES.get(method_name, ())):
        method(model, SyntheticImages(images), 0.7, options)
    wall = time.perf_counter() - t
    log.close()
    copy = 4 * params
    lines = [
        f"{method_name} on {model_name} ({params / 1e6:.1f} M parameters, 4P = {copy / 1e9:.2f} GB), {images} images, "
        f"{iterations} steps of batch 1, {wall:.0f} s; MALLOC_MMAP_THRESHOLD_="
        f"{os.environ.get('MALLOC_MMAP_THRESHOLD_', 'unset (glibc default)')}",
        f"{'phase':24s} {'GB at end':>9s} {'GB peak':>8s} {'4P at end':>9s} {'4P peak':>8s}",
    ]
    for phase, now, high in log.rows[1:]:
        lines.append(f"{phase:24s} {now / 1e9:9.2f} {high / 1e9:8.2f} {now / copy:9.1f} {high / copy:8.1f}")
    return lines


def main(argv=None) -> int:
    p = text_parser("benchmarks.scale.memory_phases", __doc__)
    p.add_argument("--model", default="vit_base", help="a model of the ImageNet catalogue (random weights)")
    p.add_argument("--method", default="fcpts")
    p.add_argument("--images", type=int, default=4)
    p.add_argument("--iterations", type=int, default=2)
    args = p.parse_args(argv)
    lines = measure(args.model, args.method, args.images, args.iterations)
    emit(lines, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
