"""The ablation: its seed summary (means, sample sd and differences paired by seed, from the JSON lines) and
its variants (each a valid option set of its method)."""

import json

import pytest

from benchmarks.accuracy import ablation
from benchmarks.accuracy.ablation import summarize_seeds
from fcpts.methods import get_method


def row(variant: str, seed: int, top1: float, before: float = 0.9) -> dict:
    return {
        "model": "resnet32", "iterations": 400, "variant": variant, "seed": seed, "top1": top1,
        "sparsity_before_exact_step": before,
    }  # fmt: skip


def test_differences_are_paired_by_seed_and_only_over_seeds_both_ran(tmp_path):
    rows = [row("default", 0, 86.0), row("default", 1, 88.0), row("x", 1, 87.0, before=0.8), row("x", 2, 50.0)]
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = summarize_seeds([str(path)]).splitlines()
    default = next(line for line in lines if "| default |" in line)
    x = next(line for line in lines if "| x |" in line)
    assert "| 2 | 87.00 ± 1.41 |  | 86.00, 88.00 | 0.9000 |" in default
    # seed 1 is the only seed both ran: 87 - 88; seed 2 has no default to pair with
    assert "| 2 | 68.50 ± 26.16 | -1.00 | 87.00, 50.00 | 0.8500 |" in x


@pytest.mark.parametrize("variant", sorted(ablation.VARIANTS))
def test_every_variant_is_a_valid_option_set_of_its_method(variant):
    """A misspelt option or a refused combination fails here, not hours into a queue of rows."""
    options = dict(ablation.VARIANTS[variant])
    method = get_method(options.pop("method", "fcpts"))
    method.make_options(overrides=options).validate()
