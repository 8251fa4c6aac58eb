"""The held-out choice reads only training images until it has chosen: calibration and held-out indices are
disjoint, the chooser refuses any score that is not held-out, the test split is loaded after the choice, and the
output names its command, commit, seeds, held-out hash, device and wall time."""

import json

import pytest
import torch

from benchmarks.accuracy import heldout_choice
from benchmarks.accuracy.heldout_choice import RunStore, TrainingSplit, choose, parse_candidate, split_training
from tests.conftest import require_data


def test_held_out_images_are_training_images_outside_calibration():
    split = split_training(10_000, 1024, 1000, seed=0)
    assert len(split.calibration) == 1024 and len(split.held_out) == 1000
    assert not set(split.calibration) & set(split.held_out)
    assert split_training(10_000, 1024, 1000, seed=1).held_out_sha256 != split.held_out_sha256
    assert split_training(10_000, 1024, 1000, seed=0) == split  # seeded: the same images again
    with pytest.raises(ValueError, match="must not be calibration"):
        TrainingSplit([1, 2, 3], [3, 4])
    with pytest.raises(ValueError, match="exceed the 100 training images"):
        split_training(100, 64, 50, seed=0)


def rows(scores: dict) -> list[dict]:
    return [
        {"seed": s, "target": 0.9, "candidate": name, "held_out_top1": v[s], "agreement_with_dense": v[s]}
        for name, v in scores.items()
        for s in range(len(v))
    ]


def test_choice_is_the_best_mean_held_out_top1_and_a_tie_keeps_the_first():
    assert choose(rows({"default": [50.0, 52.0], "other": [53.0, 50.0]}), ["default", "other"])[0.9]["chosen"] == (
        "other"
    )
    assert choose(rows({"default": [50.0, 52.0], "other": [52.0, 50.0]}), ["default", "other"])[0.9]["chosen"] == (
        "default"
    )


def test_chooser_refuses_a_score_from_the_test_split():
    leaked = rows({"default": [50.0, 52.0]})
    leaked[0]["test_top1"] = 80.0
    with pytest.raises(ValueError, match="test_top1"):
        choose(leaked, ["default"])


def test_candidate_syntax():
    assert parse_candidate("default") == ("default", {})
    assert parse_candidate("no-ramp:ramp=0,ramp_start=1") == ("no-ramp", {"ramp": 0, "ramp_start": 1})
    with pytest.raises(ValueError, match="NAME"):
        parse_candidate(":ramp=0")


def test_an_interrupted_selection_keeps_its_finished_runs_and_refuses_other_settings(tmp_path):
    """Runs finished before an interruption are read back (scores and weights), not run again; the unfinished
    one gets a checkpoint path in the folder; a folder made with other settings or options is refused."""
    ran = []

    def run_candidate(seed, target, options, calibration, checkpoint):
        ran.append((seed, options.get("ramp"), checkpoint))
        open(checkpoint, "w").close()  # what a method leaves while it runs
        if len(ran) == 3:
            raise KeyboardInterrupt  # the third run is interrupted
        model = torch.nn.Linear(2, 1)
        torch.nn.init.constant_(model.weight, float(len(ran)))
        return model

    def score(model, held_out):
        return {"held_out_top1": model.weight[0, 0].item(), "agreement_with_dense": 100.0}

    def selection(store):
        return heldout_choice.run_selection(
            run_candidate=run_candidate,
            score_held_out=score,
            n_train=100,
            candidates=[("default", {}), ("no-ramp", {"ramp": 0})],
            targets=[0.9],
            seeds=[0, 1],
            n_calibration=10,
            n_held_out=10,
            store=store,
        )

    folder, identity = tmp_path / "choice.runs", {"method": "fcpts-plus", "git_commit": "abc"}
    with pytest.raises(KeyboardInterrupt):
        selection(RunStore(folder, identity, lambda: torch.nn.Linear(2, 1)))
    assert ran[2][2] == str(folder / "seed1-sp0.9-default.ckpt")
    rows, choices, models, _ = selection(RunStore(folder, identity, lambda: torch.nn.Linear(2, 1)))
    assert len(ran) == 5  # seed 0's two runs were kept: only seed 1's ran again
    assert sorted(p.name for p in folder.glob("*.ckpt")) == []  # a finished run's checkpoint is cleared
    assert [r["held_out_top1"] for r in rows] == [1.0, 2.0, 4.0, 5.0]
    assert models[(0, 0.9, "no-ramp")].weight[0, 0].item() == 2.0 and choices[0.9]["chosen"] == "no-ramp"
    with pytest.raises(SystemExit, match="git_commit: 'abc' there, 'def' now"):
        RunStore(folder, {**identity, "git_commit": "def"}, lambda: torch.nn.Linear(2, 1))
    with pytest.raises(SystemExit, match="ran with options"):
        RunStore(folder, identity, lambda: torch.nn.Linear(2, 1)).load("seed0-sp0.9-no-ramp", {"ramp": 0.5})


def test_a_bad_candidate_option_fails_before_any_image_is_read(monkeypatch, tmp_path):
    monkeypatch.setattr(heldout_choice, "load_cifar", lambda *a: pytest.fail("read images before checking options"))
    with pytest.raises(Exception, match="no option"):
        heldout_choice.main(["--candidate", "default", "bad:no_such_option=1", "--out", str(tmp_path / "x")])


@pytest.mark.slow
def test_real_cifar_run_chooses_on_training_indices_and_reads_test_only_after(monkeypatch, tmp_path):
    require_data("cifar10", "CIFAR-10")
    require_data("weights/cifar10/resnet20.th", "the CIFAR-10 ResNet-20 checkpoint")
    events: list = []
    real_load, real_choose = heldout_choice.load_cifar, heldout_choice.choose
    real_selection = heldout_choice.run_selection

    def load(root, dataset, split):
        events.append(("load", split))
        return real_load(root, dataset, split)

    def chooser(held_out_rows, candidates):
        events.append(("choose", None))
        return real_choose(held_out_rows, candidates)

    seen: dict = {}

    def selection(*, run_candidate, score_held_out, **kw):
        def run(seed, target, options, calibration, checkpoint):
            seen.setdefault("calibration", {})[seed] = set(calibration)
            return run_candidate(seed, target, options, calibration, checkpoint)

        def score(model, held_out):
            seen.setdefault("held_out", {}).setdefault(id(held_out), set(held_out))
            return score_held_out(model, held_out)

        return real_selection(run_candidate=run, score_held_out=score, **kw)

    monkeypatch.setattr(heldout_choice, "load_cifar", load)
    monkeypatch.setattr(heldout_choice, "choose", chooser)
    monkeypatch.setattr(heldout_choice, "run_selection", selection)
    out = tmp_path / "choice"
    result = heldout_choice.main(
        [
            *("--method", "fcpts-plus", "--target", "0.5", "--seeds", "0", "1"),
            *("--candidate", "default", "no-ramp:ramp=0", "--iterations", "1", "--batch-size", "8"),
            *("--calibration", "16", "--held-out", "20", "--out", str(out)),
        ]
    )
    # The test split is loaded once, after the choice; nothing before it but the training split.
    assert events.index(("load", "test")) > events.index(("choose", None))
    assert [e for e in events[: events.index(("choose", None))] if e[0] == "load"] == [("load", "train")]
    held = list(seen["held_out"].values())
    assert all(len(h) == 20 for h in held) and all(len(c) == 16 for c in seen["calibration"].values())
    for seed, split in result["held_out_indices_sha256"].items():
        expected = split_training(10_000, 16, 20, seed)
        assert split == expected.held_out_sha256
        assert set(expected.held_out) in held and not set(expected.held_out) & seen["calibration"][seed]
    written = json.loads(out.with_suffix(".json").read_text())
    for key in ("command", "git_commit", "seeds", "held_out_indices_sha256", "dense_held_out_top1", "device", "wall_s"):
        assert written[key], key
    assert written["weights"]["sha256"]
    assert written["seeds"] == [0, 1] and written["command"].startswith("python ")
    assert all("test" not in k for row in written["held_out_rows"] for k in row)
    chosen = written["choices"]["0.5"]["chosen"]
    assert written["test_after_choice"]["0.5"]["candidate"] == chosen
    assert len(written["test_after_choice"]["0.5"]["test_top1"]["values"]) == 2
    md = out.with_suffix(".md").read_text()
    assert written["git_commit"] in md and "after the choice" in md and written["held_out_indices_sha256"]["0"] in md
