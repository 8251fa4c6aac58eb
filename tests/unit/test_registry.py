"""The registry is the only list of methods: its records say each method's role, family and what it needs of a
model, and `list_methods` answers from them; a method registered anywhere appears in `--all-methods`, tables and
figures, where the task's method set (the paper's table, the features of its models) admits it."""

import subprocess
import sys

import pytest

from fcpts.core.options import MethodOptions
from fcpts.methods import METHODS, NOT_IN_PAPER, PAPER_BASELINE, PAPER_METHOD, Method, list_methods, register
from fcpts.methods import registry as registry_module
from fcpts.methods.registry import ROLES, unregister
from tasks.grid.cli import parse_args
from tasks.grid.layout import METHOD_SETS, MethodSet, all_methods, extra_methods, paper_rows
from tasks.reporting import figures
from tasks.reporting.paper import read_reference, table2
from tests.fake_records import cifar_record


@pytest.mark.parametrize(
    "filters, keeps",
    [
        ({"role": PAPER_METHOD}, lambda m: m.role == PAPER_METHOD),
        ({"role": (PAPER_BASELINE, NOT_IN_PAPER)}, lambda m: m.role in (PAPER_BASELINE, NOT_IN_PAPER)),
        ({"ablation": False}, lambda m: not m.ablation),
        ({"family": "pot"}, lambda m: m.family == "pot"),
        ({"trains": True}, lambda m: m.trains),
        ({"role": NOT_IN_PAPER, "trains": False}, lambda m: m.role == NOT_IN_PAPER and not m.trains),
    ],
)
def test_list_methods_keeps_exactly_the_matching_methods_in_registry_order(filters, keeps):
    assert list_methods(**filters) == [name for name, m in METHODS.items() if keeps(m)]


def test_the_paper_s_methods_and_baselines_are_registered():
    """The paper's own rows (its Tables 1-4) need these; methods beyond the paper may come and go."""
    assert {"fcpts", "fcpts-fixed"} <= set(list_methods(role=PAPER_METHOD))
    assert {"pot-l2norm", "pot-erk", "probmask", "str"} <= set(list_methods(role=PAPER_BASELINE))


def test_registry_order_is_the_roles_then_comparisons_before_fcpts_variants():
    names = list_methods()
    assert sorted(names) == sorted(METHODS) and names == list(METHODS)
    assert [ROLES.index(METHODS[m].role) for m in names] == sorted(ROLES.index(METHODS[m].role) for m in names)
    extras = list_methods(role=NOT_IN_PAPER)
    assert extras[-1] == "fcpts-plus"  # FCPTS's own variant after the other comparisons


def test_methods_drawn_in_their_own_colour_have_one_no_other_method_has():
    """Figures tell lines apart by colour: a shared colour (ProbMask and FCPTS+ once) reads as one method."""
    own = [m.style[0] for m in METHODS.values() if m.style[0] != "tab:gray"]  # gray: the magnitude rules
    assert len(own) == len(set(own)), sorted(own)


def test_bad_filters_and_records_are_named():
    with pytest.raises(ValueError, match="unknown role 'paper'"):
        list_methods(role="paper")
    with pytest.raises(ValueError, match="role 'ours' is not one of"):
        Method("toy", "Toy", lambda *a: a, MethodOptions, role="ours")
    with pytest.raises(ValueError, match="unknown feature wings; features: batchnorm"):
        Method("toy", "Toy", lambda *a: a, MethodOptions, requires=("wings",))
    with pytest.raises(ValueError, match="unknown feature wings"):
        MethodSet("table2", frozenset({"wings"}))
    with pytest.raises(ValueError, match="unknown method set 'imagenet'; sets: cifar"):
        all_methods("imagenet")
    assert Method("toy", "Toy", lambda *a: a, MethodOptions).family == "toy"  # its own family by default


@pytest.mark.parametrize("grid", METHOD_SETS)
def test_all_methods_is_the_paper_table_s_rows_then_the_extras_its_models_allow(grid):
    """The paper's set comes from the paper's reference numbers, the extras from a registry query: no grid
    names a method, and the library names no grid."""
    spec, chosen = METHOD_SETS[grid], all_methods(grid)
    paper = paper_rows(read_reference(), spec.table)
    assert paper and set(paper) <= set(chosen)
    extras = [m for m in chosen if m not in paper]
    assert all(METHODS[m].role == NOT_IN_PAPER and not METHODS[m].ablation for m in extras)
    assert all(set(METHODS[m].requires) <= spec.features for m in extras)
    assert bool(extras) == spec.extras and chosen == [m for m in list_methods() if m in chosen]


@pytest.fixture
def toy_method():
    """A method beyond the paper, needing BatchNorm, registered here only."""
    register(Method("toy", "Toy method", lambda *a: a, MethodOptions, role=NOT_IN_PAPER, requires=("batchnorm",)))
    yield "toy"
    unregister("toy")


def test_a_registered_method_appears_in_all_methods_tables_and_figures(toy_method, tmp_path):
    # Beyond the paper, a comparison: in registry order, before FCPTS's own variants.
    chosen = parse_args("cifar", ["--all-methods"]).methods
    assert "toy" in chosen and chosen == all_methods("cifar")
    variants = [m for m in chosen if METHODS[m].family == "fcpts" and METHODS[m].role == NOT_IN_PAPER]
    assert all(chosen.index("toy") < chosen.index(v) for v in variants)
    assert "toy" in extra_methods("cifar") and "toy" in extra_methods("imagenet-cnn")
    assert "toy" not in extra_methods("imagenet-vit") and "toy" not in extra_methods("voc")  # no BN; no extras
    records = [cifar_record("fcpts"), cifar_record("toy", top1=80.0)]
    text, rows = table2(records, read_reference(), tmp_path)
    row = next(line for line in text.splitlines() if line.startswith("| resnet32 | Toy method (not in the paper) |"))
    assert "**80.00/99.00** (−12.60) [paper-cpu] · —" in row
    assert [r["method"] for r in rows] == ["fcpts", "toy"]
    assert "toy" in figures.figure1_lines()


def test_the_readme_summary_takes_its_columns_from_the_registry():
    """Methods marked `headline` are the README summary's columns, the studied method's family first; one more
    marked method is one more column, with no list to edit."""
    from tasks.reporting import readme

    marked = [name for name, m in METHODS.items() if m.headline]
    assert sorted(readme.summary_methods()) == sorted(marked) and readme.summary_methods()[0] == "fcpts"
    register(Method("toy-headline", "Toy", lambda *a: a, MethodOptions, headline=True))
    try:
        assert readme.summary_methods()[-1] == "toy-headline"
    finally:
        unregister("toy-headline")


def test_figure4_pairs_each_rates_pinning_variant_of_the_studied_method_with_it():
    records = [cifar_record("fcpts"), cifar_record("fcpts-fixed", top1=85.0), cifar_record("obs")]
    pairs = figures.fixed_learned_pairs(records)
    assert [(a["method"], b["method"]) for a, b in pairs] == [("fcpts-fixed", "fcpts")]


def test_unregistering_takes_the_toy_out_again(toy_method):
    unregister(toy_method)
    assert toy_method not in METHODS and toy_method not in list_methods()
    register(Method(toy_method, "Toy", lambda *a: a, MethodOptions))  # for the fixture's own unregister


def test_fcpts_finds_the_baselines_without_importing_them_itself():
    """`import fcpts` does not import `baselines`; the first read of the registry does (no import cycle)."""
    code = (
        "import sys, fcpts; assert 'baselines' not in sys.modules; "
        "fcpts.get_method('pot-erk'); assert 'baselines.pot' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=registry_module.__file__.rsplit("/fcpts/", 1)[0])
    assert "baselines" in registry_module.method_packages()


def test_method_packages_are_the_entry_points_then_the_importable_defaults(monkeypatch):
    class EntryPoint:
        value = "other_methods:register_all"

    monkeypatch.setattr(
        registry_module, "entry_points", lambda group: [EntryPoint()] if group == "fcpts.methods" else []
    )
    monkeypatch.setattr(registry_module, "DEFAULT_PACKAGES", ("baselines", "not_installed_methods"))
    assert registry_module.method_packages() == ["other_methods", "baselines"]  # a missing default is skipped


def test_a_method_package_that_fails_to_import_fails_every_read(monkeypatch):
    fresh = registry_module.Registry()
    monkeypatch.setattr(registry_module, "method_packages", lambda: ["no_such_method_package"])
    for _ in range(2):
        with pytest.raises(ModuleNotFoundError, match="no_such_method_package"):
            list(fresh)
