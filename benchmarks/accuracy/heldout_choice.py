"""Choose among a method's candidate option sets on held-out CIFAR training images, then, only once the choice is
made, read the test split and report the chosen option's test accuracy.

The CIFAR task calibrates on a seeded subset of the training split. Here a second seeded subset of the rest of the
training split, disjoint from it, is the held-out set: every candidate (a named set of options) runs on the
calibration images for every seed and target, and is scored on the held-out images (top-1 against the labels,
and top-1 agreement with the dense model). `choose` sees only those scores and picks, per target, the candidate
with the highest held-out top-1 averaged over the seeds (a tie goes to the earlier candidate: list the current
default first). The test split is read afterwards, for the chosen candidate alone. One JSON and one Markdown table
record the choice, the seeds' spread, the held-out indices' hash, command, commit, device and wall time.

Every finished run (its held-out scores and its pruned weights) is kept in STEM.runs/, and a run in progress
checkpoints there, so the same command, interrupted, carries on where it stopped (a paper-budget choice takes
hours of a CPU); runs made with other settings or by another commit are refused, naming the folder.

    python -m benchmarks.accuracy.heldout_choice --method fcpts-plus --target 0.8 0.9 --seeds 0 1 \\
        --candidate default no-ramp:ramp=0 block-weight-1:block_weight=1 temperature-8:temperature=8 \\
        --out results/benchmarks/heldout_fcpts_plus_cpu

(benchmarks/accuracy/heldout.py does the same for one option set of the ImageNet task's `cpu` profile.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from fcpts import get_method
from fcpts.core.io import save_torch_atomic, write_json_atomic
from tasks.cifar.data import CifarCalibration
from tasks.grid.cifar_data import CIFAR_CLASSES, load_cifar, normalize_cifar
from tasks.grid.cifar_models import CIFAR_MODELS, cifar_resnet
from tasks.grid.data import CIFAR_DATA, calibration_indices, calibration_subset, resolve_data_root
from tasks.grid.evaluate import classify
from tasks.grid.profiles import parse_option_pairs
from tasks.grid.records import command_line, device_description, git_commit
from tasks.grid.runner import clear_checkpoints
from tasks.grid.weights import default_cifar_weights, load_checkpoint

HELD_OUT_SEED_OFFSET = 1_000  # the held-out draw's seed is the calibration seed plus this: never the same draw


@dataclass(frozen=True)
class TrainingSplit:
    """Calibration and held-out indices into the training split: disjoint by construction (checked)."""

    calibration: list[int]
    held_out: list[int]

    def __post_init__(self) -> None:
        shared = set(self.calibration) & set(self.held_out)
        if shared:
            raise ValueError(f"held-out images must not be calibration images; {len(shared)} are both")

    @property
    def held_out_sha256(self) -> str:
        return hashlib.sha256(",".join(map(str, self.held_out)).encode()).hexdigest()[:16]


def split_training(n_train: int, n_calibration: int, n_held_out: int, seed: int) -> TrainingSplit:
    """The task's calibration subset for `seed` (the same images a CIFAR record of that seed calibrates on) and a
    seeded held-out subset of the remaining training images."""
    if n_calibration + n_held_out > n_train:
        raise ValueError(
            f"{n_calibration} calibration + {n_held_out} held-out images exceed the {n_train} training images; "
            "ask for fewer held-out images (--held-out)"
        )
    calibration, _ = calibration_subset(n_train, n_calibration, seed, "train", "crop4+flip")
    taken = set(calibration)
    rest = [i for i in range(n_train) if i not in taken]
    held = sorted(rest[j] for j in calibration_indices(len(rest), n_held_out, seed + HELD_OUT_SEED_OFFSET))
    return TrainingSplit(calibration, held)


def parse_candidate(text: str) -> tuple[str, dict]:
    """`"no-ramp:ramp=0,ramp_start=1"` -> ("no-ramp", {"ramp": 0, "ramp_start": 1}); `"default"` -> ("default", {})."""
    name, _, pairs = text.partition(":")
    if not name:
        raise ValueError(f"a candidate wants NAME or NAME:KEY=VALUE[,KEY=VALUE], got {text!r}")
    return name, parse_option_pairs([p for p in pairs.split(",") if p])


HELD_OUT_KEYS = ("held_out_top1", "agreement_with_dense")


def choose(held_out_rows: Sequence[Mapping], candidates: Sequence[str]) -> dict[float, dict]:
    """Per target: the candidate with the highest held-out top-1 averaged over seeds (ties: the earlier one), with
    every candidate's mean and spread. Rows carry held-out scores only; a row with any other score is refused, so
    nothing measured on the evaluation split can steer the choice."""
    for row in held_out_rows:
        stray = sorted(k for k in row if "test" in k)
        if stray:
            raise ValueError(f"the choice reads held-out scores only; a row carries {', '.join(stray)}")
    choices: dict[float, dict] = {}
    for target in sorted({r["target"] for r in held_out_rows}):
        summary = {}
        for name in candidates:
            mine = [r for r in held_out_rows if r["target"] == target and r["candidate"] == name]
            top1, agree = [r["held_out_top1"] for r in mine], [r["agreement_with_dense"] for r in mine]
            summary[name] = {"held_out_top1": mean_sd(top1), "agreement_with_dense": mean_sd(agree)}
        best = max(candidates, key=lambda n: (summary[n]["held_out_top1"]["mean"], -candidates.index(n)))
        choices[target] = {"chosen": best, "by_candidate": summary}
    return choices


def mean_sd(values: Sequence[float]) -> dict:
    return {
        "mean": round(statistics.fmean(values), 2),
        "sd": round(statistics.stdev(values), 2) if len(values) > 1 else None,
        "values": list(values),
    }


class RunStore:
    """The finished runs of a selection, one folder: `<key>.json` (the held-out row, written last) and `<key>.pt`
    (the pruned weights) a run, `<key>.ckpt` while one is in progress, and `identity.json`: the settings and commit
    every run in it was made with. A folder made with other settings is refused rather than mixed in."""

    def __init__(self, folder: Path, identity: dict, make_model: Callable[[], torch.nn.Module]):
        self.folder, self.make_model = folder, make_model
        stamp = folder / "identity.json"
        if stamp.is_file():
            before = json.loads(stamp.read_text())
            changed = sorted(k for k in {*before, *identity} if before.get(k) != identity.get(k))
            if changed:
                shown = "; ".join(f"{k}: {before.get(k)!r} there, {identity.get(k)!r} now" for k in changed)
                raise SystemExit(
                    f"{folder} holds runs made with other settings ({shown}); delete it to start again, or give "
                    "another --out"
                )
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(stamp, identity)

    @staticmethod
    def key(seed: int, target: float, name: str) -> str:
        return f"seed{seed}-sp{target:g}-{name}"

    def checkpoint(self, key: str) -> str:
        return str(self.folder / f"{key}.ckpt")

    def load(self, key: str, options: dict) -> tuple[dict, torch.nn.Module] | None:
        path = self.folder / f"{key}.json"
        if not path.is_file():
            return None
        row = json.loads(path.read_text())
        if row.get("options") != options:
            raise SystemExit(f"{path} ran with options {row.get('options')}, this candidate has {options}; delete it")
        model = self.make_model()
        model.load_state_dict(torch.load(self.folder / f"{key}.pt", weights_only=True))
        return row, model

    def save(self, key: str, row: dict, model: torch.nn.Module) -> None:
        """The run's weights and row; its checkpoint goes, as a grid cell's does once its record is written."""
        save_torch_atomic(model.state_dict(), self.folder / f"{key}.pt")
        write_json_atomic(self.folder / f"{key}.json", row)
        clear_checkpoints(Path(self.checkpoint(key)))


def run_selection(
    *,
    run_candidate: Callable[[int, float, dict, list[int], str | None], torch.nn.Module],
    score_held_out: Callable[[torch.nn.Module, list[int]], dict],
    n_train: int,
    candidates: Sequence[tuple[str, dict]],
    targets: Sequence[float],
    seeds: Sequence[int],
    n_calibration: int,
    n_held_out: int,
    store: RunStore | None = None,
) -> tuple[list[dict], dict[float, dict], dict, dict]:
    """Runs every candidate x target x seed and chooses. Returns the held-out rows, the choices, the pruned models
    by (seed, target, candidate), and each seed's split. Only training indices reach the two callables. With
    `store`, a run finished earlier is read back instead of run again, and a new one checkpoints and is kept."""
    rows, models, splits = [], {}, {}
    for seed in seeds:
        split = split_training(n_train, n_calibration, n_held_out, seed)
        splits[seed] = split
        for target in targets:
            for name, options in candidates:
                key = RunStore.key(seed, target, name)
                kept = store.load(key, options) if store else None
                if kept:
                    row, model = kept
                    print(f"seed {seed} target {target} {name}: kept from {store.folder}", flush=True)
                else:
                    t = time.perf_counter()
                    model = run_candidate(seed, target, options, split.calibration, store and store.checkpoint(key))
                    wall = time.perf_counter() - t
                    scores = score_held_out(model, split.held_out)
                    row = {"seed": seed, "target": target, "candidate": name, "options": options, **scores}
                    row["wall_s"] = round(wall, 1)
                    if store:
                        store.save(key, row, model)
                    print(f"seed {seed} target {target} {name}: held-out {scores}, {wall:.0f}s", flush=True)
                rows.append(row)
                models[(seed, target, name)] = model
    return rows, choose(rows, [n for n, _ in candidates]), models, splits


def markdown(result: dict) -> str:
    head = (
        f"# Held-out choice: {result['method']} on {result['dataset']} {result['model']}\n\n"
        f"Chosen on {result['n_held_out']} held-out training images per seed (disjoint from the "
        f"{result['n_calibration']} calibration images), by mean held-out top-1 over seeds {result['seeds']}; "
        f"{result['iterations']} iterations of batch {result['batch_size']}. The test split was read only after "
        "the choice, for the chosen candidate.\n\n"
        f"- command: `{result['command']}`\n- commit: `{result['git_commit']}`\n- device: {result['device']}\n"
        f"- held-out indices sha256 by seed: {result['held_out_indices_sha256']}\n"
        f"- dense held-out top-1 by seed: {result['dense_held_out_top1']} (the dense model trained on them)\n"
        f"- wall time: {result['wall_s']} s\n\n"
    )
    lines = [
        "| target | candidate | options | held-out top-1 (mean ± sd) | agreement with dense (mean ± sd) | chosen |"
        " test top-1 of the chosen, after the choice (mean ± sd) |",
        "|---:|---|---|---:|---:|:-:|---:|",
    ]
    options = dict(result["candidates"])
    for target, choice in result["choices"].items():
        for name, s in choice["by_candidate"].items():
            chosen = name == choice["chosen"]
            test = result["test_after_choice"][target]["test_top1"] if chosen else None
            lines.append(
                f"| {float(target):.2f} | {name} | {json.dumps(options[name]) if options[name] else 'defaults'} | "
                f"{fmt(s['held_out_top1'])} | {fmt(s['agreement_with_dense'])} | {'yes' if chosen else ''} | "
                f"{fmt(test) if test else ''} |"
            )
    return head + "\n".join(lines) + "\n"


def fmt(stat: dict) -> str:
    return f"{stat['mean']:.2f}" + (f" ± {stat['sd']:.2f}" if stat["sd"] is not None else "")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cifar10", choices=sorted(CIFAR_CLASSES))
    p.add_argument("--model", default="resnet20", choices=sorted(CIFAR_MODELS))
    p.add_argument("--method", default="fcpts-plus")
    p.add_argument(
        "--candidate", nargs="+", default=["default"], help="NAME or NAME:KEY=VALUE[,KEY=VALUE]; the default first"
    )
    p.add_argument("--target", type=float, nargs="+", default=[0.9])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--calibration", type=int, default=1024, help="calibration images (the task's default)")
    p.add_argument("--held-out", type=int, default=1000, help="training images kept out of calibration to score on")
    p.add_argument("--data-root")
    p.add_argument("--out", type=Path, required=True, help="output stem: STEM.json and STEM.md are written")
    args = p.parse_args(argv)
    try:
        args.candidates = [parse_candidate(c) for c in args.candidate]
    except ValueError as e:
        p.error(str(e))
    if len({n for n, _ in args.candidates}) != len(args.candidates):
        p.error(f"candidate names must differ, got {[n for n, _ in args.candidates]}")
    if len(args.seeds) < 2:
        p.error("a choice needs the seeds' spread: give at least two --seeds")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    method = get_method(args.method)
    budget = {"iterations": args.iterations, "batch_size": args.batch_size}
    for _, options in args.candidates:  # every candidate's options checked before any image is read
        method.make_options(budget, options)
    commit, started = git_commit(), time.perf_counter()
    root = resolve_data_root(args.data_root, holding=CIFAR_DATA)
    weights = default_cifar_weights(root, args.dataset, args.model)
    num_classes = CIFAR_CLASSES[args.dataset]
    dense = cifar_resnet(args.model, num_classes)
    weights_info = load_checkpoint(dense, weights)
    x_train, y_train = load_cifar(root, args.dataset, "train")

    def fresh() -> torch.nn.Module:
        model = cifar_resnet(args.model, num_classes)
        model.load_state_dict(dense.state_dict())
        return model

    def run_candidate(
        seed: int, target: float, options: dict, calibration: list[int], checkpoint: str | None
    ) -> torch.nn.Module:
        images = CifarCalibration(x_train[calibration], augment=method.trains)
        resumable = {"checkpoint": checkpoint} if checkpoint and method.trains else {}
        model, _ = method(fresh(), images, target, **budget, seed=seed, progress=False, **options, **resumable)
        return model

    def score_held_out(model: torch.nn.Module, held_out: list[int]) -> dict:
        x = normalize_cifar(x_train[held_out])
        with torch.no_grad():
            dense.eval()
            model.eval()
            agree = (model(x).argmax(1) == dense(x).argmax(1)).float().mean()
        top1 = classify(model, x, torch.as_tensor(y_train[held_out]))["top1"]
        return {"held_out_top1": round(top1, 2), "agreement_with_dense": round(100.0 * float(agree), 2)}

    identity = {
        "method": args.method,
        "dataset": args.dataset,
        "model": args.model,
        "budget": budget,
        "n_calibration": args.calibration,
        "n_held_out": args.held_out,
        "weights_sha256": weights_info["sha256"],
        "git_commit": commit,
    }
    store = RunStore(args.out.with_name(args.out.name + ".runs"), identity, fresh)
    rows, choices, models, splits = run_selection(
        store=store,
        run_candidate=run_candidate,
        score_held_out=score_held_out,
        n_train=len(x_train),
        candidates=args.candidates,
        targets=args.target,
        seeds=args.seeds,
        n_calibration=args.calibration,
        n_held_out=args.held_out,
    )
    dense_held_out = {s: score_held_out(dense, sp.held_out)["held_out_top1"] for s, sp in splits.items()}
    # The choice is made; only now is the evaluation split read, for the chosen candidates alone.
    x_test, y_test = load_cifar(root, args.dataset, "test")
    x_eval, y_eval = normalize_cifar(x_test), torch.as_tensor(y_test)
    test_after_choice = {}
    for target, choice in choices.items():
        top1 = [round(classify(models[(s, target, choice["chosen"])], x_eval, y_eval)["top1"], 2) for s in args.seeds]
        test_after_choice[target] = {"candidate": choice["chosen"], "test_top1": mean_sd(top1)}
    default = args.candidates[0][0]
    result = {
        "method": args.method,
        "dataset": args.dataset,
        "model": args.model,
        "candidates": args.candidates,
        "targets": args.target,
        "seeds": args.seeds,
        "iterations": args.iterations,
        "batch_size": args.batch_size,
        "n_calibration": args.calibration,
        "n_held_out": args.held_out,
        "held_out_indices_sha256": {s: sp.held_out_sha256 for s, sp in splits.items()},
        "calibration_indices_sha256": {
            s: hashlib.sha256(",".join(map(str, sp.calibration)).encode()).hexdigest()[:16] for s, sp in splits.items()
        },
        "data": {"root": str(root), "choice_split": "train", "test_read_after_choice": True},
        "weights": weights_info,
        "dense_held_out_top1": dense_held_out,  # the dense model saw these images in its own training
        "held_out_rows": rows,
        "choices": choices,
        "default_candidate": default,
        "choice_agrees_with_default": {t: c["chosen"] == default for t, c in choices.items()},
        "test_after_choice": test_after_choice,
        "wall_s": round(time.perf_counter() - started, 1),  # this invocation's; each run's is in its row
        "runs_wall_s": round(sum(r["wall_s"] for r in rows), 1),
        "device": device_description(),
        "torch_threads": torch.get_num_threads(),
        "git_commit": commit,
        "command": command_line(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(json.loads(json.dumps(result))))
    print(markdown(json.loads(json.dumps(result))))
    return result


if __name__ == "__main__":
    main()
