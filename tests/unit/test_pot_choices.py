"""The scale benchmark's account of POT's per-layer choices is what POT does at that calibration size."""

import copy

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
        assert [objective for _, _, objective in listed.values()] == [r["objective"] for r in report.per_layer]
        assert [inputs for _, inputs, _ in listed.values()] == [
            "recomputed" if mb * 1e6 * len(x) > cache else "cached" for mb, _, _ in listed.values()
        ]
        seen.add(tuple((inputs, objective) for _, inputs, objective in listed.values()))
    assert len(seen) == 3  # each cache made other choices
