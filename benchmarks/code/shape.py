"""Benchmark: the code's size and shape (lines per folder, entry points, mypy's coverage, docs, the suite's time from
pytest logs); `--root` measures another checkout (e.g. `git worktree add /tmp/before COMMIT`) with this code."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

from benchmarks import parser
from benchmarks.report import measure_then_emit

CODE = ("fcpts", "baselines", "tasks", "benchmarks", "paper_figures", "results")
TYPED = ("fcpts", "baselines", "tasks", "benchmarks")  # what mypy should cover


def python_files(root: Path, folder: str) -> list[Path]:
    return sorted(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)


def line_count(paths: list[Path]) -> int:
    return sum(len(p.read_text(errors="replace").splitlines()) for p in paths)


def mypy_config(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text()).get("tool", {}).get("mypy", {})


def mypy_files(root: Path) -> list[Path]:
    """The Python files under the folders `[tool.mypy] files` names (a file named directly counts too)."""
    named = mypy_config(root).get("files", [])
    named = [named] if isinstance(named, str) else named
    out: set[Path] = set()
    for name in named:
        path = root / name
        out |= set(python_files(root, name)) if path.is_dir() else ({path} if path.suffix == ".py" else set())
    return sorted(out)


def suite_seconds(log: Path) -> str:
    """The closing line of a pytest log: its counts and wall time."""
    lines = [ln.strip("= ") for ln in log.read_text(errors="replace").splitlines() if re.search(r" in [\d.]+s", ln)]
    return lines[-1] if lines else "no closing line"


def shape(root: Path, suites: dict[str, Path]) -> list[str]:
    rows = [f"checkout {root.name}"]
    total = 0
    for folder in CODE:
        files = python_files(root, folder)
        lines = line_count(files)
        total += lines
        rows.append(f"  {folder + '/':<16}{lines:>7} lines in {len(files):>3} Python files")
    rows.append(f"  {'non-test code':<16}{total:>7} lines")
    tests = python_files(root, "tests")
    rows.append(f"  {'tests/':<16}{line_count(tests):>7} lines in {len(tests):>3} Python files")
    code_files = [p for folder in CODE for p in python_files(root, folder)]
    mains = sum(len(re.findall(r"^def main\(", p.read_text(errors="replace"), re.M)) for p in code_files)
    rows.append(f"  entry points (def main): {mains}")
    typed = [p for folder in TYPED for p in python_files(root, folder)]
    disabled = mypy_config(root).get("disable_error_code", [])
    rows.append(
        f"  mypy checks {len(mypy_files(root))} of the {len(typed)} files under {', '.join(TYPED)}, "
        f"{len(disabled)} error codes disabled{': ' + ', '.join(disabled) if disabled else ''}"
    )
    docs = sorted((root / "docs").rglob("*.md"))
    notebook = [p for p in docs if "notebook" in p.parts]
    rows.append(f"  docs: {line_count(docs)} lines, of which the notebook {line_count(notebook)}")
    rows += [f"  suite {name}: {suite_seconds(log)}" for name, log in suites.items()]
    return rows


def main(argv: list[str] | None = None) -> None:
    p = parser("code-shape")
    args = p.parse_args(argv)
    suites = {}
    for item in args.suite:
        name, sep, log = item.rpartition("=")
        if not sep or not Path(log).is_file():
            p.error(f"--suite {item!r}: give NAME=LOG with LOG a pytest log file")
        suites[name] = Path(log)
    measure_then_emit(lambda: shape(args.root.resolve(), suites), args.output)
