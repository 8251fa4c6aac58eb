"""Profile builders: a task states its numbers once, and every profile keeps the name its records carry."""

import pytest

from fcpts.methods import METHODS
from tasks.grid.profiles import (
    Profile,
    cpu_profile,
    paper_profile,
    pot_budget,
    pot_methods,
    profile_table,
    quick_profile,
)


def test_a_cpu_profile_gives_pot_the_same_images_and_its_own_iterations():
    p = cpu_profile("cpu", 1000, iterations=200, batch_size=32, pot_iterations=700).with_note("why")
    assert p == Profile(
        "cpu", n_calibration=1000, iterations=200, batch_size=32, note="why", methods=pot_budget(1000, 700)
    )
    assert pot_methods() == ("pot-l2norm", "pot-erk")  # the registry's POT family, one entry per allocation
    for m in pot_methods():
        assert p.n_calibration_for(m) == 1000 and p.options_for(m) == {"iterations": 700}


def test_extra_method_entries_join_the_pot_budget():
    p = cpu_profile("cpu", 8, 2, 4, pot_iterations=3, methods={"fcpts": {"options": {"lr": 0.02}}})
    assert p.options_for("fcpts") == {"lr": 0.02} and p.options_for("pot-erk") == {"iterations": 3}


def test_quick_is_named_and_marked_as_no_result():
    p = quick_profile(8, iterations=2, batch_size=4, eval_limit=16, pot_iterations=2)
    assert (p.name, p.eval_limit, p.note) == ("quick", 16, "smoke test only; not a result")


def test_a_table_keeps_the_order_given_and_refuses_two_profiles_of_one_name():
    table = profile_table(paper_profile(), quick_profile(8, 2, 4, 8, 2))
    assert list(table) == ["paper", "quick"]
    with pytest.raises(ValueError, match="share a name"):
        profile_table(quick_profile(8, 2, 4, 8, 2), quick_profile(16, 2, 4, 8, 2))


def test_a_rerun_pins_the_options_its_record_ran_with_not_todays_defaults():
    """A record made before a default changed re-runs as it ran: its own values where they differ from
    today's, the method's `DEFAULTS_BEFORE` for an option it predates; run-local options are the re-run's."""
    from dataclasses import asdict

    from tasks.cifar.grid import PROFILES
    from tasks.grid.record_options import pinned_options
    from tasks.grid.rerun import record_profile

    profile = asdict(PROFILES["paper-cpu"])
    old = {"method": "fcpts-plus", "profile": profile, "method_options": {"ramp": 0.5, "checkpoint": "/old/x.pt"}}
    # predates block_weight: ran with weight 1; and with a ramp of 0.5 at every target, today's "auto" only from 90%
    assert pinned_options(old) == {"block_weight": 1.0, "ramp": 0.5}
    new = {**old, "method_options": {"block_weight": "auto", "lr": 0.5, "seed": 3, "progress": True}}
    assert pinned_options(new) == {"lr": 0.5}  # today's default weight; seed and progress are the re-run's
    fitted = {"method": "fcpts", "profile": profile, "method_options": {"iterations": 1600, "batch_size": 64}}
    assert pinned_options(fitted) == {}  # the profile's budget sets them again, whatever the library's default
    rebuilt = record_profile(old)
    assert rebuilt.name == "paper-cpu" and rebuilt.options_for("fcpts-plus") == {"block_weight": 1.0, "ramp": 0.5}
    assert rebuilt.options_for("pot-erk") == PROFILES["paper-cpu"].options_for("pot-erk")
    pot = {"method": "pot-erk", "profile": profile, "method_options": {"iterations": 7}}
    # the profile's own value wins; the record predates the closed-form Gram gradient: autograd's, pinned
    assert record_profile(pot).options_for("pot-erk") == {"iterations": 1000, "gram_gradient": "autograd"}
    pot_today = {**pot, "method_options": {"iterations": 7, "gram_gradient": "closed-form"}}
    assert record_profile(pot_today).options_for("pot-erk") == {"iterations": 1000}


def test_detection_gives_its_blocks_to_every_method_that_distills_blocks():
    """Read from the registry (options taking `block_names`), so FCPTS+ gets them as FCPTS does."""
    from tasks.voc.grid import PROFILES, distill_profile

    p = distill_profile(PROFILES["cpu"], ["head.0", "head.1"], "mse-blocks")
    blocks = {"reconstruction": "mse-blocks", "block_names": ["head.0", "head.1"]}
    assert {m for m, entry in p.methods.items() if entry.get("options") == blocks} == {
        "fcpts",
        "fcpts-fixed",
        "fcpts-plus",
    }
    assert p.options_for("pot-erk") == {"iterations": 1000} and p.name == "cpu"


def test_an_option_that_changes_no_result_keeps_the_profiles_name():
    """`--option calibration_workers=16` (or log_every, device) applies without renaming the profile, so its
    records are the profile's cells; a result-changing option beside it still names a profile of its own."""
    p = quick_profile(8, iterations=2, batch_size=4, eval_limit=16, pot_iterations=2)
    local = p.with_option_pairs(("fcpts",), ["calibration_workers=16", "log_every=10"], "", "options")
    assert (local.name, local.note) == (p.name, p.note)
    assert local.options_for("fcpts") == {"calibration_workers": 16, "log_every": 10}
    both = p.with_option_pairs(("fcpts",), ["calibration_workers=16", "lr=0.1"], "", "options")
    assert both.name == "quick-lr0.1" and both.options_for("fcpts") == {"calibration_workers": 16, "lr": 0.1}

    from dataclasses import asdict

    from tasks.grid.rerun import record_profile

    record = {"method": "fcpts", "profile": asdict(both), "method_options": {"calibration_workers": 16, "lr": 0.1}}
    assert record_profile(record).options_for("fcpts") == {"lr": 0.1}  # a re-run makes its batches its own way


def test_every_profile_gives_each_method_its_iterations_not_the_librarys_default():
    """The library fits a method's default iterations to its calibration set; a task's cells never take that
    default: every profile states them, so its records keep the budget they were made with."""
    from tasks.cifar.grid import PROFILES as CIFAR
    from tasks.grid.runner import cell_options
    from tasks.imagenet.grid import PROFILES as IMAGENET
    from tasks.regression import all_subsets
    from tasks.voc.grid import PROFILES as VOC

    profiles = [*CIFAR.values(), *IMAGENET.values(), *VOC.values(), *(s.profile for s in all_subsets())]
    for profile in profiles:
        for m in METHODS:
            options = cell_options(profile, m, seed=0)
            assert getattr(options, "iterations", 0) is not None, (profile.name, m)
    paper = IMAGENET["paper"]
    assert cell_options(paper, "fcpts", 0).iterations == 1600 and cell_options(paper, "pot-erk", 0).iterations == 20_000
