"""The scale benchmark's account of POT's per-layer choices is what POT does at that calibration size."""

import copy

import pytest
import torch

from baselines.pot import POTOptions, pot
from benchmarks.scale.pot_choices import choices
from tests.unit.tiny import wide_cnn


def test_the_choices_listed_are_the_ones_pot_makes():
    """At a cache everything fits in, and at caches under the layers' inputs and Gram statistics, the objective
    listed for every layer is the one POT's report names, and inputs over the cache are listed as recomputed."""
    x = torch.randn(32, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    seen = set()
    for cache in (4e9, 2e5, 1e4):
        cfg = POTOptions(iterations=5, batch_size=8, progress=False, cache_bytes=cache)
        listed = choices(wide_cnn(), x[:1], len(x), cfg.iterations, cfg)
        _, report = pot(copy.deepcopy(wide_cnn()), x, 0.6, cfg)
        assert [row[2] for row in listed.values()] == [r["objective"] for r in report.per_layer]
        assert [row[1] for row in listed.values()] == [
            "recomputed" if inputs_gb * 1e9 > cache else "cached" for *_, inputs_gb, _ in listed.values()
        ]
        seen.add(tuple(row[1:3] for row in listed.values()))
    assert len(seen) == 3  # each cache made other choices


def test_choose_for_makes_a_few_images_choose_as_many_would():
    """`choose_for` makes a run of 8 images take the objectives a run of 32 takes at the same cache (the scale
    benchmark's probes run so); without it the 8 images fit where the 32 do not."""
    x = torch.randn(32, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    cfg = dict(iterations=5, batch_size=8, progress=False, cache_bytes=1e4)
    many = [r["objective"] for r in pot(wide_cnn(), x, 0.6, POTOptions(**cfg))[1].per_layer]
    few = [r["objective"] for r in pot(wide_cnn(), x[:8], 0.6, POTOptions(**cfg))[1].per_layer]
    planned = POTOptions(choose_for={"images": 32, "iterations": 5}, **cfg)
    few_as_many = [r["objective"] for r in pot(wide_cnn(), x[:8], 0.6, planned)[1].per_layer]
    assert few_as_many == many != few


@pytest.mark.parametrize("bad", [{"images": 32}, {"images": 0, "iterations": 5}, {"images": 3.5, "iterations": 5}, 32])
def test_choose_for_names_what_it_needs(bad):
    with pytest.raises(ValueError, match="choose_for must be None or"):
        POTOptions(choose_for=bad).validate()
