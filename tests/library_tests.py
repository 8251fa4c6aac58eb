"""Which test modules are the library's own tests, read from their imports rather than from a list kept by hand.

The library is what the wheel installs (`fcpts`, `baselines`) on its core dependencies (torch, numpy, tqdm). A test
module is one of its tests when it lies in tests/unit/ or tests/library/ (integration and results tests need the
tasks, data and committed results) and every module it imports, anywhere in it, is the library, a core dependency,
pytest, the standard library or a test helper under tests/ whose own imports are the same; an optional package it
can do without is taken with `pytest.importorskip`, which is not an import statement. `pytest --library-only`
(tests/conftest.py) collects only these: tox's core and lowest envs run them on the wheel without extras, so a new
library test joins them by what it imports, and a test that imports a task leaves them.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
LIBRARY = {"fcpts", "baselines"}  # pyproject: [tool.setuptools.packages.find]
CORE_DEPENDENCIES = {"torch", "numpy", "tqdm"}  # pyproject: [project] dependencies
TEST_TOOLS = {"pytest"}
LIBRARY_TEST_FOLDERS = (TESTS / "unit", TESTS / "library")
# Loaded by pytest before any test module in every environment, so importing from it adds nothing.
ALWAYS_LOADED = {TESTS / "conftest.py"}


def _imported(path: Path) -> set[str]:
    """Every module name an import statement anywhere in `path` names (`from a.b import c`: `a.b` and `a.b.c`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                package = path.parent.relative_to(ROOT).parts
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _helper_file(name: str) -> Path | None:
    """The file of a module under tests/ (`tests.unit.tiny` -> tests/unit/tiny.py), None for a name that is not one
    (such as `tests.unit.tiny.tiny_net`, a name inside it)."""
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def outside_imports(path: Path) -> frozenset[str]:
    """The modules `path` imports, itself or through the test helpers it imports, that are not the library, a core
    dependency, pytest or the standard library (empty: it runs on the wheel without extras)."""
    outside: set[str] = set()
    for name in _imported(path):
        top = name.split(".")[0]
        if top in LIBRARY | CORE_DEPENDENCIES | TEST_TOOLS or top in sys.stdlib_module_names:
            continue
        if top == "tests":
            helper = _helper_file(name)
            if helper is not None and helper not in ALWAYS_LOADED and helper != path:
                outside |= outside_imports(helper)
            continue
        outside.add(name)
    return frozenset(outside)


def is_library_test(path: Path) -> bool:
    path = Path(path).resolve()
    in_folder = any(path.is_relative_to(folder) for folder in LIBRARY_TEST_FOLDERS)
    return in_folder and path.name.startswith("test_") and path.suffix == ".py" and not outside_imports(path)


def library_tests() -> list[Path]:
    return sorted(p for folder in LIBRARY_TEST_FOLDERS for p in folder.rglob("test_*.py") if is_library_test(p))
