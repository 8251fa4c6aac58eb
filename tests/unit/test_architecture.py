"""The layer rule of docs/design.md: core <- methods (fcpts's own, and the baselines) <- grid <- task drivers <-
reporting, and no cycles; the baselines import only the core and the registry, and the library never imports them;
no driver imports another driver, and reporting imports no driver and not the grid's CLI.

Every import in the library and the suite (module level or inside a function) is read from the source, so a
new upward import or cycle fails here before it confuses anyone.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Every package or module under tasks/ other than the grid and reporting is a task driver: found, not listed.
FOUND_DRIVERS = sorted(
    f"tasks.{p.stem}"
    for p in (ROOT / "tasks").iterdir()
    if p.stem not in ("grid", "reporting", "__init__", "__pycache__")
    and ((p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py")
)
LAYERS = [  # (prefix, layer); the longest matching prefix wins
    ("fcpts.core", 0),
    ("fcpts.methods", 1),
    ("fcpts", 1),
    ("baselines", 1),
    ("tasks.grid", 2),
    ("tasks", 2),
    *((driver, 3) for driver in FOUND_DRIVERS),
    ("tasks.reporting", 4),
    ("benchmarks", 5),
]
NAMES = ["core", "methods", "grid", "drivers", "reporting", "benchmarks"]
PACKAGES = ("fcpts", "baselines", "tasks", "benchmarks")
DRIVERS = [prefix for prefix, layer in LAYERS if layer == 3]


def part_of(module: str) -> str | None:
    """The top-level part (the longest LAYERS prefix) a module belongs to."""
    best = None
    for prefix, _ in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best)):
            best = prefix
    return best


def layer_of(module: str) -> int | None:
    part = part_of(module)
    return None if part is None else dict(LAYERS)[part]


def within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str | None = None) -> set[str]:
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package.split(".")
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return found


def _python_files():
    return [p for d in PACKAGES for p in (ROOT / d).rglob("*.py")]


def graph() -> dict[str, set[str]]:
    files = _python_files()
    modules = {module_name(p): p for p in files}
    return {m: {i for i in imports_of(p) if i in modules and i != m} for m, p in modules.items()}


def test_no_import_from_a_lower_layer_to_a_higher_one():
    upward = []
    for module, deps in graph().items():
        for dep in deps:
            if layer_of(dep) is not None and layer_of(module) is not None and layer_of(dep) > layer_of(module):
                upward.append(f"{module} ({NAMES[layer_of(module)]}) imports {dep} ({NAMES[layer_of(dep)]})")
    assert not upward, "\n".join(sorted(upward))


def test_every_module_has_a_layer():
    assert [m for m in graph() if layer_of(m) is None] == []


def test_no_import_cycles():
    g = graph()
    # A package's __init__ importing its own submodules is how packages work, not a cycle between modules.
    edges = {m: {d for d in deps if not (m.startswith(d + ".") and g.get(d) is not None)} for m, deps in g.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in edges[m]:
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d) :] + [m, d]) if d in stack else f"{m} -> {d}")
            elif d not in state:
                visit(d, stack + [m])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [])
    assert not cycles, "\n".join(cycles)


def test_the_rule_catches_an_upward_import(tmp_path):
    assert layer_of("fcpts.core.masks") < layer_of("baselines.pot") < layer_of("tasks.grid.runner")
    assert layer_of("fcpts.methods.fcpts") == layer_of("baselines.pot")
    assert layer_of("tasks.grid.runner") < layer_of("tasks.cifar.grid") < layer_of("tasks.reporting.paper")
    bad = tmp_path / "masks.py"
    bad.write_text("from tasks.grid import runner\nfrom ..methods import fcpts\n")
    found = imports_of(bad, "fcpts.core.masks")
    assert {"tasks.grid.runner", "fcpts.methods.fcpts"} <= found
    assert all(layer_of(m) > layer_of("fcpts.core.masks") for m in ("tasks.grid.runner", "fcpts.methods.fcpts"))


BASELINES_MAY_IMPORT = ("baselines", "fcpts.core", "fcpts.methods.registry")


def forbidden(g: dict[str, set[str]], importers, allowed=None, denied=None) -> list[str]:
    """'m imports d' for each module m under `importers` importing a d outside `allowed` (or inside `denied`)."""
    return sorted(
        f"{m} imports {d}"
        for m, deps in g.items()
        if within(m, importers)
        for d in deps
        if (allowed is not None and not within(d, allowed)) or (denied is not None and within(d, denied))
    )


def test_the_baselines_import_only_the_core_and_the_registry():
    assert forbidden(graph(), ["baselines"], allowed=BASELINES_MAY_IMPORT) == []


def test_the_library_never_imports_the_baselines():
    """`fcpts.get_method` finds them through the registry, which imports them by name on first use."""
    assert forbidden(graph(), ["fcpts"], denied=["baselines"]) == []


def test_the_baseline_rules_catch_a_wrong_import():
    g = {"baselines.pot": {"fcpts.core.masks", "fcpts.methods.fcpts"}, "fcpts.methods.fcpts": {"baselines.obs"}}
    assert forbidden(g, ["baselines"], allowed=BASELINES_MAY_IMPORT) == ["baselines.pot imports fcpts.methods.fcpts"]
    assert forbidden(g, ["fcpts"], denied=["baselines"]) == ["fcpts.methods.fcpts imports baselines.obs"]


def driver_to_driver(g: dict[str, set[str]]) -> list[str]:
    """'m imports d' for each driver module importing a module of another driver."""
    return sorted(
        f"{m} imports {d}"
        for m, deps in g.items()
        if within(m, DRIVERS)
        for d in deps
        if within(d, DRIVERS) and part_of(d) != part_of(m)
    )


# Reporting reads records and the paper's reference numbers: what it needs of a model (the ImageNet catalogue, a
# weights file) lives in tasks/grid, never in a driver, and its commands' parsers come from tasks.grid.help.
REPORTING_MAY_NOT_IMPORT = [*DRIVERS, "tasks.grid.cli"]


def test_reporting_imports_no_driver_and_no_cli():
    assert forbidden(graph(), ["tasks.reporting"], denied=REPORTING_MAY_NOT_IMPORT) == []


def test_no_driver_imports_another_driver():
    """Shared pieces live in tasks/grid; deploy and the regression check find a task's driver through the task
    registry (`tasks.grid.rerun.get_task`), which imports it by name."""
    assert driver_to_driver(graph()) == []


def test_the_driver_rules_catch_a_wrong_import():
    g = {
        "tasks.reporting.figures": {"tasks.cifar.grid", "tasks.grid.weights"},
        "tasks.deploy.driver": {"tasks.cifar.grid", "tasks.deploy.export", "tasks.grid.rerun"},
        "tasks.cifar.grid": {"tasks.cifar.data"},
    }
    assert forbidden(g, ["tasks.reporting"], denied=REPORTING_MAY_NOT_IMPORT) == [
        "tasks.reporting.figures imports tasks.cifar.grid"
    ]
    assert driver_to_driver(g) == ["tasks.deploy.driver imports tasks.cifar.grid"]


OPENMMLAB = {"mmdet", "mmengine", "mmcv"}
MMDET_TASK = "tasks.voc.mmdet"


def test_only_the_mmdet_subpackage_imports_openmmlab():
    """The suite runs without the `[mmdet]` extra: mmdet, mmengine and mmcv are imported in one subpackage."""
    offenders = []
    for path in _python_files():
        module = module_name(path)
        if module == MMDET_TASK or module.startswith(MMDET_TASK + "."):
            continue
        if any(i.split(".")[0] in OPENMMLAB for i in imports_of(path)):
            offenders.append(module)
    assert offenders == []


def test_nothing_imports_the_mmdet_subpackage():
    """The `--framework mmdet` switch and re-running an mmdet record reach its driver by task name ("coco")."""
    importers = set()
    for path in _python_files():
        module = module_name(path)
        if not module.startswith(MMDET_TASK) and any(i.startswith(MMDET_TASK) for i in imports_of(path)):
            importers.add(module)
    assert importers == set()
    assert layer_of(MMDET_TASK + ".grid") == layer_of("tasks.voc.grid")  # a driver, above grid and methods
