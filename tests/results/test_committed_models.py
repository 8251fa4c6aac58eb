"""Every committed model file is the one its record describes: the record beside it pins its sha256, and a
sparse checkpoint's zeros are the ones its deploy record counted (a re-run of a method on another thread
count moves masks, so a deployed checkpoint carries its own provenance rather than claiming a run record's)."""

import json
import subprocess
from pathlib import Path

import pytest
import torch

from fcpts.core.io import file_sha256

ROOT = Path(__file__).resolve().parents[2]
MODEL_FILES = subprocess.run(["git", "ls-files", "results/*.pt", "results/*.th", "results/*.pth"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()  # fmt: skip


def test_there_are_committed_models_to_check():
    assert len(MODEL_FILES) >= 4


@pytest.mark.parametrize("path", MODEL_FILES)
def test_each_model_file_has_a_record_that_pins_it(path):
    file = ROOT / path
    record = json.loads(file.with_suffix(".json").read_text())
    pinned = record["checkpoint"] if "checkpoint" in record else record["weights"]
    assert pinned["path"] == path
    assert pinned["sha256"] == file_sha256(file), f"{path} is not the file its record describes"
    assert record.get("command") or pinned.get("command"), f"{path}: its record says no command that made it"


@pytest.mark.parametrize("path", [p for p in MODEL_FILES if p.startswith("results/deploy/")])
def test_a_deployed_checkpoint_has_the_zeros_its_record_counted(path):
    checkpoint = torch.load(ROOT / path, map_location="cpu", weights_only=True)
    record = json.loads((ROOT / path).with_suffix(".json").read_text())
    weights = [v for k, v in checkpoint["state_dict"].items() if k.endswith(".weight") and v.dim() in (2, 4)]
    zeros, total = sum(int((w == 0).sum()) for w in weights), sum(w.numel() for w in weights)
    assert zeros / total == pytest.approx(record["sparsity"], abs=0.5 / total)
    assert checkpoint["top1"] == record["top1_pytorch"]
    assert checkpoint["source_record"] and checkpoint["command"] and checkpoint["git_commit"]
