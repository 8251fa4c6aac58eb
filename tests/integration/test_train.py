"""Dense training recipe (tasks.cifar.train) on real CIFAR-100 images, tiny sizes."""

import json
from pathlib import Path

import pytest
import torch

from tasks.cifar.train import augment_batch, main, parse_args, train
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.training import lr_factor
from tasks.grid.weights import load_checkpoint
from tasks.voc import train as voc_train

TINY = [
    "--dataset",
    "cifar100",
    "--model",
    "resnet20",
    "--train-limit",
    "256",
    "--eval-limit",
    "200",
    "--batch-size",
    "64",
    "--eval-every",
    "1",
    "--no-progress",
]


def test_augment_batch_crops_and_flips_within_the_padded_image():
    x = torch.arange(2 * 32 * 32 * 3, dtype=torch.int64).remainder(256).to(torch.uint8).view(2, 32, 32, 3)
    out = augment_batch(x, torch.Generator().manual_seed(0))
    assert out.shape == (2, 3, 32, 32)
    same = augment_batch(x, torch.Generator().manual_seed(0))
    assert torch.equal(out, same), "augmentation must depend only on the generator's seed"


def test_lr_schedule_warms_up_then_decays_to_zero():
    assert lr_factor(0, 10, 100) == 0.1
    assert lr_factor(10, 10, 100) == 1.0
    assert 0.49 < lr_factor(55, 10, 100) < 0.51
    assert lr_factor(100, 10, 100) == 0.0


def test_training_writes_loadable_weights_and_record_and_resumes_exactly(tmp_path):
    straight = parse_args(
        [*TINY, "--epochs", "2", "--results-dir", str(tmp_path / "a"), "--checkpoint-dir", str(tmp_path / "ca")]
    )
    rec = train(straight)
    assert [h["epoch"] for h in rec["history"]] == [1, 2]
    assert rec["history"][1]["train_loss"] < rec["history"][0]["train_loss"]
    model = cifar_resnet("resnet20", 100)
    info = load_checkpoint(model, tmp_path / "a" / "cifar100" / "resnet20.th")
    assert info["best_prec1"] == rec["final_test"]["top1"]
    on_disk = json.loads((tmp_path / "a" / "cifar100" / "resnet20.json").read_text())
    assert on_disk["recipe"]["epochs"] == 2 and on_disk["weights"]["sha256"] == info["sha256"]

    # Interrupt after epoch 1 (a 1-epoch run leaves its checkpoint), then resume the 2-epoch run from it:
    # batches and augmentation depend only on (seed, step), so the weights must be identical.
    ckpt_dir = tmp_path / "cb"
    one = parse_args([*TINY, "--epochs", "2", "--results-dir", str(tmp_path / "b"), "--checkpoint-dir", str(ckpt_dir)])
    state = _run_until_step(one, steps=4)
    assert state["step"] == 4
    train(one)
    a = torch.load(tmp_path / "a" / "cifar100" / "resnet20.th", weights_only=False)["state_dict"]
    b = torch.load(tmp_path / "b" / "cifar100" / "resnet20.th", weights_only=False)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def _run_until_step(args, steps):
    """Run training and stop it (as a kill would) right after the checkpoint at `steps`."""
    import fcpts.core.checkpoint as t

    class Stop(Exception):
        pass

    real_save = t.save_torch_atomic

    def save_then_stop(obj, path):
        real_save(obj, path)
        if obj.get("step") == steps:
            raise Stop

    t.save_torch_atomic = save_then_stop
    try:
        train(args)
    except Stop:
        pass
    finally:
        t.save_torch_atomic = real_save
    (ckpt,) = list(Path(args.checkpoint_dir).rglob("*.pt"))
    return torch.load(ckpt, weights_only=False)


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert main([*TINY, "--data-root", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("recipe", [parse_args, voc_train.parse_args], ids=["cifar", "voc"])
@pytest.mark.parametrize(
    "flag, value, said",
    [
        ("--epochs", "0", "must be >= 1, got 0"),
        ("--batch-size", "x", "expected a whole number, got 'x'"),
        ("--lr", "0", "must be > 0.0, got 0"),
        ("--lr", "nan", "must be > 0.0, got nan"),
        ("--weight-decay", "-1", "must be >= 0.0, got -1"),
        ("--seed", "-2", "must be >= 0, got -2"),
        ("--checkpoint-every-s", "0", "must be > 0.0, got 0"),
    ],
)
def test_a_recipe_refuses_a_value_that_would_train_nothing_before_reading_data(recipe, flag, value, said, capsys):
    with pytest.raises(SystemExit) as stop:
        recipe([flag, value])
    assert stop.value.code == 2 and f"argument {flag}: {said}" in capsys.readouterr().err
