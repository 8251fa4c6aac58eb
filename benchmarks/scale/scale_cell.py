"""One cell of the scale benchmark in its own process (its peak memory its own), timed on probes by kind of method;
`python -m benchmarks.scale.scale_cell SPEC_JSON` prints one JSON line."""

from __future__ import annotations

import copy
import json
import os
import resource
import sys
import threading
import time
from dataclasses import fields
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from benchmarks.report import synchronize
from fcpts.core.masks import layer_weight, prunable_layers
from fcpts.core.options import MethodOptions
from fcpts.methods import Method, get_method

IMAGE_SIZE = 224
SHARED_OPTIONS = {f.name for f in fields(MethodOptions)} | {"allocation"}


class SyntheticImages(Dataset):
    """`n` normal 3x224x224 images, each made from its index when read (no memory until a method holds them)."""

    def __init__(self, n: int, size: int = IMAGE_SIZE):
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if not 0 <= i < self.n:
            raise IndexError(i)
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, self.size, self.size, generator=g)


def method_kind(method: Method) -> str:
    """'training', 'layer-wise' (options of its own) or 'one-shot'."""
    if method.trains:
        return "training"
    own = method.options.field_names() - SHARED_OPTIONS - set(method.fixed)
    return "layer-wise" if own else "one-shot"


class PeakRSS:
    """The highest resident set size of this process while the block runs, in bytes: the kernel's high-water mark
    (VmHWM, reset through /proc/self/clear_refs) where Linux offers it, else sampled."""

    def __init__(self, every_s: float = 0.02):
        self.every_s, self.peak, self._exact, self._stop = every_s, 0, False, threading.Event()

    @staticmethod
    def now() -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    @staticmethod
    def high_water_mark() -> int:
        """VmHWM of /proc/self/status in bytes (0 where there is none)."""
        try:
            with open("/proc/self/status") as f:
                return next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), 0)
        except (OSError, ValueError):
            return 0

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            self._stop.wait(self.every_s)

    def __enter__(self) -> PeakRSS:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS
            self._exact = self.high_water_mark() > 0
        except OSError:
            pass
        self.peak = self.now()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now(), self.high_water_mark() if self._exact else 0)


def layer_costs(model: nn.Module) -> dict[str, dict[str, int]]:
    """Each prunable layer's multiply-accumulates for one 224-px image and its weight count, in model order."""
    layers = prunable_layers(model)
    macs: dict[str, int] = {}

    def hook(name: str):
        def record(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
            w = module.weight
            assert isinstance(w, torch.Tensor)
            macs[name] = macs.get(name, 0) + output.numel() * (w.numel() // w.shape[0])

        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in layers.items()]
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE))
    for h in handles:
        h.remove()
    return {n: {"macs": macs.get(n, 0), "params": layer_weight(m).numel()} for n, m in layers.items()}


def spread(names: list[str], k: int) -> list[str]:
    """`k` names at the middles of `k` equal stretches of the list (typical layers, not the ends); all if fewer."""
    if k >= len(names):
        return list(names)
    return [names[int((i + 0.5) * len(names) / k)] for i in range(k)]


# A layer-wise method's passes over its images for its layers' sake (POT's input collection, obs's allocation).
PASSES_FOR_LAYERS = ("input_collection_s", "allocation_s")


def run_probe(
    method: Method, build, n_images: int, budget: dict, overrides: dict, device: str, layer_wise: bool = False
) -> dict:
    """One call of the method on a fresh model: wall time, peak memory, step times, time on the layers."""
    model = build()
    images = SyntheticImages(n_images)
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    options = method.make_options(budget, {**overrides, "device": device, "progress": False})
    with PeakRSS() as rss:
        synchronize(device)
        t = time.perf_counter()
        _, report = method(model, images, 0.7, options)
        synchronize(device)
        wall = time.perf_counter() - t
    out: dict[str, Any] = {"images": n_images, "wall_s": round(wall, 4), "peak_rss_gb": round(rss.peak / 1e9, 3)}
    if device.startswith("cuda"):
        out["peak_cuda_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 3)
    out["step_s"] = [row["step_s"] for row in report.history if "step_s" in row]
    rows = [row["wall_s"] for row in report.per_layer if row.get("wall_s") is not None]
    if layer_wise and rows:  # the time on its layers: their rows and its passes for them
        layers_s = sum(rows) + sum(report.extra.get(k) or 0.0 for k in PASSES_FOR_LAYERS)
        out["layers_s"] = round(min(layers_s, wall), 4)  # the rows' rounding can pass the wall time
    if report.extra.get("batch_workers"):  # their memory is theirs: peak_rss_gb is this process's alone
        out["batch_workers"] = report.extra["batch_workers"]
    return out


def makes_size_choices(method: Method) -> bool:
    """Whether the method can be told to choose how it runs as at another size (`choose_for`, `paper_choices`)."""
    return "choose_for" in method.options.field_names()


def run_cell(spec: dict) -> dict:
    """Every probe of one (model, method) cell."""
    from tasks.imagenet.models import architecture

    torch.manual_seed(0)
    method = get_method(spec["method"])
    kind = method_kind(method)
    device = spec["device"]
    t = time.perf_counter()
    template = architecture(spec["model"])
    build_s = time.perf_counter() - t
    costs = layer_costs(template)

    build = partial(copy.deepcopy, template)
    base = dict(spec.get("options") or {})  # the profile's own options for this method (e.g. POT's iterations)
    result: dict[str, Any] = {"kind": kind, "build_s": round(build_s, 2), "layers_total": len(costs), "probes": []}
    result["macs_total"] = sum(c["macs"] for c in costs.values())
    result["params_total"] = sum(c["params"] for c in costs.values())
    if kind == "training":
        overrides = {**base, "log_every": 1, **spec.get("small_options", {})}
        overrides = {k: v for k, v in overrides.items() if k in method.options.field_names()}
        if "search_runs" in method.options.field_names():  # a search of whole runs: time one, count the rest
            result["runs_per_cell"] = overrides.get("search_runs", vars(method.make_options({}, {}))["search_runs"])
            overrides["search_runs"] = 1
        iterations = spec["warmup"] + spec["steps"]
        for batch in spec["batch_sizes"]:
            budget = {"iterations": iterations, "batch_size": batch, "seed": 0}
            probe = run_probe(method, build, spec["n_images"], budget, overrides, device)
            probe["batch_size"] = batch
            result["probes"].append(probe)
        return result
    if kind == "one-shot":
        probe = run_probe(method, build, spec["images"][0], {"seed": 0}, {}, device)
        result["probes"].append(probe)
        return result
    chosen = spread(list(costs), spec["layers"])
    result["layers_timed"] = chosen
    result["macs_timed"] = sum(costs[n]["macs"] for n in chosen)
    result["params_timed"] = sum(costs[n]["params"] for n in chosen)
    keep = set(chosen)
    overrides = {**base, "filter_fn": lambda module, name: name in keep}
    iterative = "iterations" in method.options.field_names()
    if spec.get("paper_choices") and makes_size_choices(method):
        overrides["choose_for"] = {"images": spec["paper_images"]}
        if iterative:
            overrides["choose_for"]["iterations"] = spec["paper_iterations"]
    plan = [(n, spec["iterations"][0]) for n in spec["images"]]
    if iterative:
        plan.append((spec["images"][0], spec["iterations"][1]))
    if spec.get("warmup_probe"):  # untimed, 8 iterations: past a CUDA graph's capture
        run_probe(
            method, build, plan[0][0], {"seed": 0}, {**overrides, **({"iterations": 8} if iterative else {})}, device
        )
    for n_images, iterations in plan:
        probe_overrides = {**overrides, **({"iterations": iterations} if iterative else {})}
        probe = run_probe(method, build, n_images, {"seed": 0}, probe_overrides, device, layer_wise=True)
        if iterative:
            probe["iterations"] = iterations
        result["probes"].append(probe)
    return result


def main(argv: list[str] | None = None) -> None:
    spec = json.loads((argv or sys.argv[1:])[0])
    torch.set_num_threads(int(spec.get("threads") or torch.get_num_threads()))
    try:
        result = {"status": "ok", **run_cell(spec)}
    except Exception as e:  # the parent records the failure of this cell and goes on with the others
        result = {"status": "error", "error": f"{type(e).__name__}: {str(e)[:500]}"}
    result["peak_rss_process_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9, 3)
    print("SCALE_CELL " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
