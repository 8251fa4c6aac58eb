"""Profile builders: a task states its numbers once, and every profile keeps the name its records carry."""

import pytest

from tasks.grid.profiles import (
    POT_METHODS,
    Profile,
    cpu_profile,
    paper_profile,
    pot_budget,
    profile_table,
    quick_profile,
)


def test_a_cpu_profile_gives_pot_the_same_images_and_its_own_iterations():
    p = cpu_profile("cpu", 1000, iterations=200, batch_size=32, pot_iterations=700).with_note("why")
    assert p == Profile(
        "cpu", n_calibration=1000, iterations=200, batch_size=32, note="why", methods=pot_budget(1000, 700)
    )
    for m in POT_METHODS:
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
