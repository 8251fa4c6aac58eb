"""Dense training of an mmdet detector with mmengine's Runner, resumable: the substitute set's detector.

    python -m tasks.voc.mmdet.train --data-root data/voc-cifar \\
        --config tasks/voc/mmdet/configs/ssdlite_mobilenetv2_voc-cifar10-160.py

The config's datasets are pointed at a VOC- or COCO-layout folder; the Runner checkpoints every epoch in a work
folder (default `results/checkpoints/mmdet/<dataset>/<model>/`) and the same command resumes from the last one.
The weights go to `results/weights/<dataset>/mmdet-<config name>.pth` (what the grid loads by default) with a
training record beside it. `--epochs`, `--train-limit`, `--eval-limit`, `--batch-size` shorten a run (recorded).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pickle
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from tasks.grid import cli
from tasks.grid.help import add_results_dir, command_parser
from tasks.grid.paths import RESULTS_DIR

# mmdet, mmengine and torch are imported by the work, once the arguments parse and the extra is found there:
# --help needs none of them, and a missing extra is one line naming it instead of an import traceback.

# numpy 2 names it numpy._core, numpy 1.26 numpy.core
np_multiarray = importlib.import_module("numpy._core.multiarray" if hasattr(np, "_core") else "numpy.core.multiarray")

SESSIONS = "fcpts-sessions.json"  # beside the Runner's checkpoints: wall time and iterations of each invocation


def _history_statistic(owner, name: str):
    """`getattr` as a pickled HistoryBuffer needs it (its statistics methods), and for nothing else."""
    from mmengine.logging import HistoryBuffer

    if owner is HistoryBuffer and name in {"min", "max", "mean", "current", *HistoryBuffer._statistics_methods}:
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(f"a checkpoint asks for getattr({owner!r}, {name!r}); refused (weights-only)")


@contextmanager
def runner_checkpoints_weights_only():
    """Allow the few globals of the Runner's own checkpoints (its message hub's HistoryBuffers of numpy arrays), so
    torch keeps loading weights-only and a checkpoint a config names can never run code."""
    import torch
    from mmengine.logging import HistoryBuffer

    allowed = [
        HistoryBuffer,
        np.ndarray,
        np.dtype,
        *{type(np.dtype(code)) for code in np.typecodes["AllFloat"] + np.typecodes["AllInteger"] + "?"},
        np_multiarray._reconstruct,
        np_multiarray.scalar,
        (_history_statistic, "builtins.getattr"),
    ]
    with torch.serialization.safe_globals(allowed):
        yield


def session_timer(path: Path):
    """A Runner hook that appends each invocation's iterations and wall time to a JSON list at `path`."""
    from mmengine.hooks import Hook

    from fcpts.core.io import write_json_atomic
    from tasks.grid.records import device_description

    class SessionTimer(Hook):
        def sessions(self) -> list[dict]:
            return json.loads(path.read_text()) if path.is_file() else []

        def before_train(self, runner) -> None:
            self.start_iter, self.start, self.start_cpu = runner.iter, time.perf_counter(), time.process_time()

        def after_train(self, runner) -> None:
            iterations = runner.iter - self.start_iter
            if iterations > 0:
                wall, cpu = time.perf_counter() - self.start, time.process_time() - self.start_cpu
                session = {
                    "start_iter": self.start_iter,
                    "end_iter": runner.iter,
                    "wall_s": round(wall, 1),
                    "s_per_iter": round(wall / iterations, 3),
                    # the main process's CPU time: less dependent on how busy the machine was
                    "cpu_s_per_iter": round(cpu / iterations, 3),
                    "load_average_1min_at_end": round(os.getloadavg()[0], 2),
                    "device": device_description(next(runner.model.parameters()).device),
                }
                write_json_atomic(path, [*self.sessions(), session])

    return SessionTimer()


def parse_args(argv=None) -> argparse.Namespace:
    p = command_parser("python -m tasks.voc.mmdet.train", __doc__)
    p.add_argument("--config", required=True)
    p.add_argument("--data-root", help="a VOC- or COCO-layout folder (default: $FCPTS_DATA_ROOT, then ../shared/data)")
    p.add_argument("--work-dir", help="the Runner's folder (checkpoints, logs); default under results/checkpoints/")
    add_results_dir(p, str(RESULTS_DIR / "weights"), "where the final weights and record go", "--out-dir")
    p.add_argument("--epochs", type=int, help="override the config's epochs (smoke tests; recorded)")
    p.add_argument("--train-limit", type=int, help="train on the first N images only (smoke tests; recorded)")
    p.add_argument("--eval-limit", type=int, help="validate and test on the first N images only (smoke tests)")
    p.add_argument("--batch-size", type=int, help="override the config's training batch (smoke tests; recorded)")
    return p.parse_args(argv)


def train(args: argparse.Namespace) -> None:
    from tasks.voc.mmdet import exit_if_missing

    exit_if_missing()
    from mmengine.runner import Runner

    from fcpts.core.io import save_torch_atomic
    from tasks.grid.paths import resolve_data_root
    from tasks.grid.records import device_description, write_training_record
    from tasks.voc.mmdet.data import find_layout, point_at
    from tasks.voc.mmdet.detector import allow_ssd_predict, load_config, mmdet_identity
    from tasks.voc.mmdet.grid import dataset_name, model_name

    cfg = load_config(args.config)
    layout = find_layout(resolve_data_root(args.data_root))
    dataset, model = dataset_name(layout, 0, None), model_name(args.config)
    work_dir = Path(args.work_dir) if args.work_dir else RESULTS_DIR / "checkpoints" / "mmdet" / dataset / model
    # the config pointed at the folder, its schedule shortened when asked, resuming when a checkpoint exists
    cfg.work_dir = str(work_dir)
    cfg.train_dataloader.dataset = point_at(
        cfg.train_dataloader.dataset, layout, layout.calibration_split, args.train_limit
    )
    for part in ("val", "test"):
        cfg[f"{part}_dataloader"].dataset = point_at(
            cfg[f"{part}_dataloader"].dataset, layout, layout.eval_split, args.eval_limit
        )
        cfg[f"{part}_evaluator"] = layout.evaluator_cfg()
    if args.epochs is not None:
        cfg.train_cfg.max_epochs = args.epochs
        for scheduler in cfg.param_scheduler:
            if scheduler.get("by_epoch", True):
                scheduler.update({"T_max": args.epochs} if "T_max" in scheduler else {}, end=args.epochs)
    if args.batch_size:
        cfg.train_dataloader.batch_size = args.batch_size
    cfg.load_from = None
    cfg.resume = (work_dir / "last_checkpoint").is_file()
    runner = Runner.from_cfg(cfg)
    allow_ssd_predict(runner.model)  # validation and test predict with it
    timer = session_timer(work_dir / SESSIONS)
    runner.register_hook(timer, priority="VERY_LOW")
    try:
        with runner_checkpoints_weights_only():
            runner.train()
    except pickle.UnpicklingError as e:
        why = str(e).strip().splitlines()[0]
        raise ValueError(
            f"a checkpoint {args.config} names (init_cfg, load_from) or one in {work_dir} holds more than weights, "
            f"so it is refused (torch loads checkpoints weights-only: {why}); use a state-dict checkpoint"
        ) from None
    test = dict(runner.test())
    weights = Path(args.results_dir) / dataset / f"{model}.pth"
    meta = {"dataset_meta": {"classes": list(layout.classes)}, "epoch": runner.train_loop.epoch,
            "iter": runner.train_loop.iter, "config": Path(args.config).name}  # fmt: skip
    state = {k: v.detach().cpu() for k, v in runner.model.state_dict().items()}  # no optimiser, no message hub
    save_torch_atomic({"state_dict": state, "meta": meta}, weights)  # what the grid loads
    record = write_training_record(
        weights,
        {
            "task": "train_mmdet",
            "dataset": dataset,
            "model": model,
            "mmdet": mmdet_identity(args.config, cfg),
            "recipe": {
                "epochs": cfg.train_cfg.max_epochs,
                "train_limit": args.train_limit,
                "eval_limit": args.eval_limit,
                "batch_size": cfg.train_dataloader.batch_size,
                "iterations": runner.train_loop.iter,
                "optimizer": cfg.optim_wrapper.optimizer.to_dict(),
                "param_scheduler": [s.to_dict() if hasattr(s, "to_dict") else dict(s) for s in cfg.param_scheduler],
                "seed": cfg.get("randomness", {}).get("seed"),
            },
            "data": layout.describe(),
            "work_dir": str(work_dir),
            "sessions": timer.sessions(),
            "final_test": {k: float(v) for k, v in test.items()},
            "device": device_description(next(runner.model.parameters()).device),  # mmengine picks it
        },
    )
    print(f"{model} on {dataset}: {record['final_test']} -> {weights}")


main = cli.script_main(parse_args, train)


if __name__ == "__main__":
    sys.exit(main())
