"""The grid runner every task shares: model x method x sparsity -> one record per cell; finished cells are skipped,
an unfinished run resumes from its checkpoint, the dense model is evaluated once per grid."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fcpts.core.io import file_sha256, save_torch_atomic, write_json_atomic, write_text_atomic
from fcpts.core.masks import check_finite_weights, check_target, layer_weight, prunable_layers
from fcpts.methods import get_method
from fcpts.methods.registry import UnknownOptionError
from tasks.grid.paths import RUNS_DIR, repo_relative
from tasks.grid.profiles import Profile
from tasks.grid.record_format import write_record
from tasks.grid.records import device_description, environment, git_commit, provenance, read_record, record_path
from tasks.grid.status import CellBusy, cell_lock


@dataclass(frozen=True)
class Where:
    """What every task's grid takes besides its data and model: seed, folders, device."""

    seed: int = 0
    data_root: str | None = None
    weights: str | None = None  # dense weights file (None: the task's default for the model)
    runs_dir: Path = RUNS_DIR
    checkpoint_dir: Path | None = None
    device: str = "cpu"
    progress: bool = True

    def grid_fields(self) -> dict[str, Any]:
        """The Grid fields that come from here."""
        return {key: getattr(self, key) for key in ("seed", "runs_dir", "progress", "checkpoint_dir")}


def dense_factory(
    make: Callable[[], nn.Module], dense: nn.Module, device: str, source: str | Path | None = None
) -> Callable[[], nn.Module]:
    """Fresh copies of the dense model on `device`; NaN or Inf weights are refused before any cell."""
    try:
        check_finite_weights(dense)
    except ValueError as e:  # name the file it came from
        fix = "; use another weights file (--weights) or re-create this one"
        raise ValueError(f"{source}: {e}{fix}" if source else str(e)) from None
    state = {k: v.clone() for k, v in dense.state_dict().items()}

    def build() -> nn.Module:
        model = make()
        model.load_state_dict(state)
        return model.to(torch.device(device))

    return build


@dataclass
class Grid:
    task: str
    dataset: str
    model: str
    build_model: Callable[[], nn.Module]  # a fresh dense model with its weights
    # (n_images, augment) -> (tensor or Dataset, info); a smaller set of the same seed is a subset of a larger
    make_calibration: Callable[[int, bool], tuple[Any, dict]]
    evaluate: Callable[[nn.Module], dict]
    profile: Profile
    seed: int
    provenance: dict = field(default_factory=dict)  # weights, data
    runs_dir: Path = RUNS_DIR
    checkpoint_dir: Path | None = None  # None: as checkpoints() says
    progress: bool = True
    metric_names: tuple[str, ...] = ("top1", "top5")  # what the log lines show; the first is the headline

    def checkpoints(self) -> Path:
        """Where the cells keep resumable state and the dense metrics: `checkpoint_dir`, else $FCPTS_CHECKPOINT_DIR,
        else runs_dir's hidden `.checkpoints/`."""
        if self.checkpoint_dir is not None:
            return self.checkpoint_dir
        return Path(os.environ.get("FCPTS_CHECKPOINT_DIR") or self.runs_dir / ".checkpoints")


class GridRecords(list):
    """A grid's records, and which cells ran now and which were left to other processes."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[Path] = []
        self.busy: list[Path] = []


def run_grid(
    grid: Grid, methods: list[str], sparsities: list[float], force: bool = False, log: Callable[[str], None] = print
) -> GridRecords:
    check_cells(grid, methods, sparsities)
    git_commit()  # pin the commit of the code that is about to run
    records, dense_metrics = GridRecords(), None
    busy = records.busy
    for method in methods:
        for target in sparsities:
            path = cell_path(grid, method, target)
            done = None if force else read_record(path)
            if done is not None:
                check_same_cell(done, path, target, grid)
                why = "a --force redo of it was interrupted: --force resumes it" if redo_begun(grid, path) else ""
                log(f"[skip] {path.resolve()} exists ({why or 'use --force to redo'})")
                records.append(done)
                continue
            try:
                with cell_lock(path):
                    if force:
                        begin_or_resume_redo(grid, path, log)
                    elif (finished := read_record(path)) is not None:  # done by another process meanwhile
                        records.append(finished)
                        continue
                    if dense_metrics is None:
                        dense_metrics = _dense_metrics(grid, log, rebuild=force)
                    records.append(_run_cell(grid, method, target, path, dense_metrics, log))
                    records.ran.append(path)
            except CellBusy as e:
                log(f"[busy] {e}")
                busy.append(path)
    if busy:
        log(f"{len(busy)} cell(s) left to the processes running them; re-run this command afterwards to collect them")
    return records


def check_cells(grid: Grid, methods: list[str], sparsities: list[float]) -> None:
    """Fail fast on a typo in a method or an option, a bad option value, or a bad target, before any work."""
    check_options(grid.profile, methods, grid.seed)
    for target in sparsities:
        check_target(target)


def cell_budget(profile: Profile, method: str, seed: int) -> dict[str, Any]:
    """What a grid grants one method's cells: the profile's budget and the method's own options."""
    return {
        "iterations": profile.iterations,
        "batch_size": profile.batch_size,
        "seed": seed,
        "options": profile.options_for(method),
    }


def cell_options(profile: Profile, method: str, seed: int, progress: bool = False, checkpoint: str | None = None):
    """The options object one cell runs with; a name or a value the method cannot take is an error here."""
    budget = cell_budget(profile, method, seed)
    return get_method(method).make_options(
        {**budget, "progress": progress, "checkpoint": checkpoint}, budget["options"]
    )


def check_options(profile: Profile, methods: Sequence[str], seed: int) -> None:
    """Every method's options built as its cells will build them: a bad one fails before the first cell."""
    for m in methods:
        try:
            cell_options(profile, m, seed)
        except UnknownOptionError:
            raise  # it names the method already
        except (TypeError, ValueError) as e:
            raise type(e)(f"method {m!r}, profile {profile.name!r}: {e}") from None


def cell_path(grid: Grid, method: str, target: float) -> Path:
    """Where the record of one cell of `grid` goes."""
    return record_path(grid.runs_dir, grid.task, grid.dataset, grid.model, method, target, grid.profile.name, grid.seed)


def check_same_cell(record: dict, path: Path, target: float, grid: Grid) -> None:
    """A record found under a cell's name must be that cell: same target, same dense weights."""
    if record["target_sparsity"] != target:
        raise ValueError(f"{path} holds target {record['target_sparsity']}, not {target}; move it away")
    mine, theirs = grid.provenance.get("weights", {}).get("sha256"), record.get("weights", {}).get("sha256")
    if mine and theirs and mine != theirs:
        raise ValueError(
            f"{path} was made from other dense weights (sha256 {theirs[:12]}, these are {mine[:12]}); "
            "pass another --results-dir for this model, or --force to replace the record"
        )


def cell_checkpoint(grid: Grid, path: Path) -> Path:
    """Where the cell whose record goes to `path` keeps its resumable state."""
    return grid.checkpoints() / path.relative_to(grid.runs_dir).with_suffix(".pt")


def _redo_marker(ckpt: Path) -> Path:
    """Beside a --force redo's checkpoint: the sha256 of the record it replaces ('none'), so only that redo resumes."""
    return ckpt.with_name(ckpt.name + ".redo")


def _replaced(path: Path) -> str:
    return file_sha256(path) if path.is_file() else "none"


def redo_begun(grid: Grid, path: Path) -> bool:
    """Whether a --force redo of this cell began, and was interrupted, since its record was written."""
    marker = _redo_marker(cell_checkpoint(grid, path))
    return marker.is_file() and marker.read_text().strip() == _replaced(path)  # hashed only where a marker is


def begin_or_resume_redo(grid: Grid, path: Path, log: Callable[[str], None]) -> None:
    """--force starts a cell clean, unless a --force redo of the same record was interrupted: that one resumes."""
    ckpt = cell_checkpoint(grid, path)
    if redo_begun(grid, path):
        log(f"[resume] the --force redo of {path.name} begun earlier goes on (remove {ckpt}* to start it clean)")
        return
    clear_checkpoints(ckpt)
    write_text_atomic(_redo_marker(ckpt), _replaced(path) + "\n")


def _devices_of_run(ckpt: Path, here: str) -> list[str]:
    """The devices a cell's run has worked on (kept beside its checkpoint), so a resumed run names each."""
    side = ckpt.with_name(ckpt.name + ".devices")
    others = set(ckpt.parent.glob(ckpt.name + ".*")) - {side, _redo_marker(ckpt)}
    started = ckpt.exists() or bool(others)  # STR: side files only
    earlier = side.read_text().splitlines() if started and side.is_file() else []
    devices = [*earlier, *([here] if here not in earlier else [])]
    side.parent.mkdir(parents=True, exist_ok=True)
    side.write_text("\n".join(devices) + "\n")
    return devices


def clear_checkpoints(ckpt: Path) -> None:
    """Remove the cell's checkpoint and its side files (after the record, before a --force run)."""
    for stale in [ckpt, *ckpt.parent.glob(ckpt.name + ".*")]:
        stale.unlink(missing_ok=True)


def _dense_metrics(grid: Grid, log, rebuild: bool = False) -> dict:
    """The dense model's metrics, kept beside the checkpoints under a key of everything they depend on, so the next
    run of the grid skips the evaluation; `rebuild` (--force) evaluates again."""
    identity = {key: getattr(grid, key) for key in ("task", "dataset", "model", "provenance")}
    identity |= {"environment": environment(), "metrics": list(grid.metric_names)}
    identity["eval_limit"] = grid.profile.eval_limit
    key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    cache = grid.checkpoints() / grid.task / grid.dataset / grid.model / f"dense-{key}.json"
    if cache.exists() and not rebuild:
        metrics, how = read_dense_cache(cache, grid.metric_names), f"kept in {cache.name}"
    else:
        t = time.perf_counter()
        metrics = grid.evaluate(grid.build_model())
        how = f"{time.perf_counter() - t:.0f}s"
        write_json_atomic(cache, {"identity": identity, "metrics": metrics})
    shown = " ".join(f"{n} {metrics[n]:.2f}" for n in grid.metric_names)
    log(f"dense {grid.model} on {grid.dataset}: {shown} ({how})")
    return metrics


def read_dense_cache(cache: Path, names: Sequence[str]) -> dict:
    """The metrics kept in a dense-metrics file; a damaged one is named with its fix."""
    try:
        metrics = json.loads(cache.read_text())["metrics"]
        if not all(isinstance(metrics.get(n), (int, float)) for n in names):
            raise ValueError(f"it lacks {', '.join(names)}")
        if bad := [n for n in names if not math.isfinite(metrics[n])]:
            raise ValueError(f"{', '.join(bad)}: not a finite number")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(
            f"the dense-metrics cache {cache} is damaged ({e}); delete it (it is only a cache) or run the "
            "command again with --force, which evaluates the dense model again and rewrites it"
        ) from None
    return metrics


def _run_cell(grid: Grid, method: str, target: float, path: Path, dense_metrics: dict, log) -> dict:
    ckpt = cell_checkpoint(grid, path)
    spec = get_method(method)
    budget = cell_budget(grid.profile, method, grid.seed)
    options = cell_options(grid.profile, method, grid.seed, grid.progress, str(ckpt))
    calibration, calibration_info = grid.make_calibration(grid.profile.n_calibration_for(method), spec.trains)
    log(f"[run] {method} at {target:.0%} on {grid.dataset}/{grid.model} ({grid.profile.name} profile)")
    torch.manual_seed(grid.seed)
    model = grid.build_model()
    devices = _devices_of_run(ckpt, device_description(next(model.parameters()).device))
    t = time.perf_counter()
    model, report = spec(model, calibration, target, options)
    method_wall = time.perf_counter() - t
    t = time.perf_counter()
    metrics = grid.evaluate(model)
    eval_s = time.perf_counter() - t
    record = {
        "task": grid.task,
        "dataset": grid.dataset,
        "model": grid.model,
        "method": method,
        "target_sparsity": target,
        "achieved_sparsity": report.achieved_sparsity,
        "hit_target": abs(report.achieved_sparsity - target) * sum(r["numel"] for r in report.per_layer) <= 1.0,
        "metrics": metrics,
        "dense_metrics": dense_metrics,
        "calibration": calibration_info,
        "profile": asdict(grid.profile),
        "budget": budget,
        "method_options": report.options,
        "seed": grid.seed,
        # A resumed run's method time adds the time spent before the interruption.
        "wall_s": report.wall_s if report.wall_s else method_wall,
        "process_wall_s": method_wall,
        "eval_s": eval_s,
        "device": "; ".join(devices),  # two when an interrupted run was resumed on another device
        **provenance(),
        **grid.provenance,
        "mask_sha256": mask_sha256(model),
        "per_layer": report.per_layer,
        "method_report": {"extra": report.extra, "history_every_10": report.history[:-1:10] + report.history[-1:]},
    }
    # The sparse state dict goes to runs_dir/models/ (not committed; tasks.deploy.driver reads it back).
    model_path = grid.runs_dir / "models" / path.relative_to(grid.runs_dir).with_suffix(".pt")
    save_torch_atomic({k: v.detach().cpu() for k, v in model.state_dict().items()}, model_path)
    record["sparse_model"] = {
        "path": repo_relative(model_path),
        "sha256": file_sha256(model_path),
        "note": "not committed; re-run the record's command with --force to re-create it",
    }
    write_record(path, record)  # compact: its calibration lists in a side file beside it
    clear_checkpoints(ckpt)  # with the side files (STR's search state): the record is the result now
    first = grid.metric_names[0]
    log(
        f"[done] {method} {target:.0%}: {first} {metrics[first]:.2f} (dense {dense_metrics[first]:.2f}), "
        f"sparsity {report.achieved_sparsity:.6f}, {record['wall_s']:.0f}s\n"
        f"       record: {path.resolve()}\n       model:  {model_path.resolve()}"
    )
    return record


def mask_sha256(model: nn.Module) -> str:
    """Hash of where the zeros are in every prunable weight: which model a record describes."""
    digest = hashlib.sha256()
    for name, layer in prunable_layers(model).items():
        digest.update(name.encode())
        digest.update((layer_weight(layer).detach().cpu() == 0).numpy().tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Column:
    """One column of the table a task prints after its grid: header, how values print, a record's value."""

    header: str
    spec: str  # the values' format: "18s" text, left-aligned; "6.2f" a number, its header right-aligned
    value: Callable[[dict], Any]

    def head(self) -> str:
        return format(self.header, self.spec if self.spec.endswith("s") else f">{self.spec.split('.')[0]}s")


def _metric_of(key: str) -> Callable[[dict], Any]:
    """A record's value of metric `key`: one function per key, as a lambda made in a loop would read the last."""
    return lambda r: r["metrics"][key]


def result_columns(metrics: dict[str, str], method_width: int = 18) -> list[Column]:
    """method, target, achieved, each metric, the dense first metric, the drop and the wall time."""
    first = next(iter(metrics))
    return [
        Column("method", f"{method_width}s", lambda r: r["method"]),
        Column("target", "6.2f", lambda r: r["target_sparsity"]),
        Column("achieved", "9.6f", lambda r: r["achieved_sparsity"]),
        *(Column(header, "7.2f", _metric_of(key)) for key, header in metrics.items()),
        Column("dense", "7.2f", lambda r: r["dense_metrics"][first]),
        Column("drop", "6.2f", lambda r: r["dense_metrics"][first] - r["metrics"][first]),
        Column("time s", "7.0f", lambda r: r["wall_s"]),
    ]


def format_table(records: list[dict], columns: Sequence[Column]) -> str:
    """A header, a rule and a row per record."""
    head = " ".join(c.head() for c in columns)
    rows = [" ".join(format(c.value(r), c.spec) for c in columns) for r in records]
    return "\n".join([head, "-" * len(head), *rows])
