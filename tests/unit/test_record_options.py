"""A default that changes must not blur the tables: seeds run with the old default are not averaged with seeds run
with the new one, a record made with today's defaults is the one a cell shows, and an old record still shown says
which default it ran with (FCPTS+'s ramp, "auto" since: none below 90%)."""

import pytest

from tasks.grid.record_options import earlier_defaults, effective_options, same_setup
from tasks.grid.records import preferred_records, same_cell_runs
from tasks.reporting.drops import drops_table
from tasks.reporting.paper import read_reference, table2
from tasks.reporting.render import seeds_of
from tests.fake_records import cifar_record


def plus(sp: float, seed: int, top1: float, ramp) -> dict:
    r = cifar_record("fcpts-plus", sp=sp, top1=top1)
    r.update(seed=seed, method_options={"ramp": ramp, "seed": seed, "checkpoint": f"/x/{seed}.pt"})
    r["budget"] = {"iterations": 1600, "batch_size": 64, "seed": seed}
    r["_path"] = r["_path"].replace("seed0", f"seed{seed}")
    return r


def test_a_ramp_at_80_percent_is_an_earlier_default_and_at_90_percent_it_is_todays():
    assert earlier_defaults(plus(0.8, 0, 91.5, 0.5)) == {"ramp": 0.5}
    assert earlier_defaults(plus(0.8, 0, 91.5, "auto")) == {}
    assert earlier_defaults(plus(0.9, 0, 89.5, 0.5)) == {}  # what "auto" runs at 90%
    assert effective_options(plus(0.9, 0, 89.5, 0.5)) == effective_options(plus(0.9, 1, 89.6, "auto"))


def test_what_the_profile_sets_or_the_record_predates_is_not_an_earlier_default():
    by_profile = plus(0.8, 0, 91.5, 0.0)
    by_profile["profile"]["methods"] = {"fcpts-plus": {"options": {"ramp": 0.0}}}
    assert earlier_defaults(by_profile) == {}
    old = plus(0.8, 0, 91.5, 0.5)
    old["method_options"].pop("ramp")  # a record without the option ran its default of the time: unknown here
    assert earlier_defaults(old) == {}


def test_seeds_are_averaged_only_within_one_setup_and_the_cell_shows_todays():
    old = [plus(0.8, s, 91.5 + s / 10, 0.5) for s in range(3)]
    new = plus(0.8, 1, 91.9, "auto")
    records = [*old[:1], new, old[2]]  # seed 1 made again with today's default
    assert not same_setup(old[0], new) and same_setup(old[0], old[2])
    shown = preferred_records(records)[("cifar", "cifar10", "resnet32", "fcpts-plus", 0.8)]
    assert shown is new  # today's default first, before seed 0 made with the old one
    assert seeds_of(new, records) == [new] and seeds_of(old[0], records) == [old[0], old[2]]


def test_table2_and_the_drops_table_mark_a_record_of_an_earlier_default(tmp_path):
    reference = read_reference()
    records = [plus(0.8, s, 91.5, 0.5) for s in range(2)] + [plus(0.9, 0, 89.5, 0.5)]
    text, rows = table2(records, reference, tmp_path)
    cell = next(line for line in text.splitlines() if line.startswith("| resnet32 | FCPTS+"))
    assert "[paper-cpu] (earlier default: ramp 0.5) · 2 seeds" in cell
    assert cell.count("earlier default") == 1  # the 90% record ran today's default
    assert "`(earlier default: option value)`" in text
    drops = drops_table(rows, reference, same_cell_runs(records))
    line = next(line for line in drops.splitlines() if line.startswith("| CIFAR-10 resnet32 80% |"))
    assert "(2 seeds, 1.10-1.10) [paper-cpu] (earlier default: ramp 0.5)" in line and "both seeds better" in line
    remade = [*records[1:], plus(0.8, 0, 91.9, "auto")]  # seed 0 made again; seed 1 still the ramp's
    text, _ = table2(remade, reference, tmp_path)
    cell = next(line for line in text.splitlines() if line.startswith("| resnet32 | FCPTS+"))
    assert "**91.90/" in cell and "(earlier default" not in cell and "· 1 seed of another setup left out" in cell


@pytest.mark.parametrize("ramp", [0.5, "auto"])
def test_the_effective_ramp_is_resolved_at_the_records_target(ramp):
    assert effective_options(plus(0.7, 0, 92.0, ramp))["ramp"] == (0.5 if ramp == 0.5 else 0.0)


def test_a_record_older_than_its_options_ran_the_budget_its_profile_set():
    """The oldest records hold no method options: their iterations are their budget's, whatever the library's
    default (None: fitted to the calibration set), so their seeds still average with later ones of one setup."""
    old = plus(0.9, 0, 89.5, "auto")
    old.pop("method_options")
    new = plus(0.9, 1, 89.6, "auto")
    new["method_options"]["iterations"] = 1600
    assert effective_options(old)["iterations"] == 1600 and same_setup(old, new)
