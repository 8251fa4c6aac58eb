"""The README is for users: short, the two commands on its first screen, its tables generated, its code runnable,
and no path of one machine in it or in docs/."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tasks.grid.paths import REPO_ROOT
from tasks.reporting import readme

README = REPO_ROOT / "README.md"
MACHINE_PATHS = re.compile(r"(?<![\w.])/(root|work|home|tmp)/")


def test_generated_blocks_are_what_the_generator_writes():
    """The methods table (registry) and results summary (records): `python -m tasks.reporting readme` rewrites
    them; a stale block fails here."""
    text = README.read_text()
    assert readme.render(text) == text, "README blocks are stale: run python -m tasks.reporting readme"


def test_render_rewrites_a_stale_block_and_refuses_unknown_markers():
    stale = "a\n<!-- BEGIN methods -->\nSTALE LINE\n<!-- END methods -->\n"
    stale += "<!-- BEGIN results -->\n<!-- END results -->\n"
    fresh = readme.render(stale)
    assert "STALE LINE" not in fresh and "| `fcpts` |" in fresh
    with pytest.raises(ValueError, match="unknown \\['nope'\\]"):
        readme.render(stale + "<!-- BEGIN nope -->\n<!-- END nope -->\n")


def test_summary_shows_the_spread_of_a_cell_run_with_several_seeds():
    """CIFAR-10 ResNet-32 90% ran FCPTS with three seeds under `paper-cpu`: the summary gives their mean ± sd, computed
    here from the record files themselves."""
    import json
    import statistics

    folder = REPO_ROOT / "results" / "runs" / "cifar" / "cifar10" / "resnet32"
    files = sorted(folder.glob("fcpts-sp90-paper-cpu-seed*.json"))
    top1 = [json.loads(p.read_text())["metrics"]["top1"] for p in files]
    assert len(top1) >= 3
    row = next(line for line in README.read_text().splitlines() if line.startswith("| CIFAR-10 ResNet-32, 90% |"))
    cell = [c.strip() for c in row.strip("|").split("|")][2]
    assert cell == f"{statistics.mean(top1):.2f} ± {statistics.stdev(top1):.2f} ({len(top1)})"


def test_every_registered_method_is_in_the_methods_table():
    block = readme.methods_block()
    for name, method in readme.METHODS.items():
        assert f"| `{name}` | {method.label} |" in block, name


def test_readme_is_short_with_the_two_commands_on_the_first_screen():
    """Its own words are short; the generated blocks grow with the registry and the records, so they do not count."""
    text = README.read_text()
    written = re.sub(r"<!-- BEGIN (\w+) -->\n.*?<!-- END \1 -->\n", "", text, flags=re.S).splitlines()
    assert len(written) <= 103, len(written)
    lines = text.splitlines()
    first_screen = "\n".join(lines[:30])
    assert "make run" in first_screen and "make test" in first_screen and "pip install" in first_screen


def test_quickstart_runs_as_pasted(tmp_path):
    code = re.search(r"## Quickstart\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    achieved = re.search(r"^achieved\s+([\d.]+)%", done.stdout, re.M)  # report.summary()'s line
    assert achieved and float(achieved.group(1)) == pytest.approx(90.0, abs=0.1), done.stdout


def test_no_machine_specific_paths_in_readme_or_docs():
    found = [
        f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}"
        for path in [README, *sorted((REPO_ROOT / "docs").rglob("*.md"))]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if MACHINE_PATHS.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_suite_citation_names_this_version():
    tomllib = pytest.importorskip("tomllib")
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    citation = re.search(r"@software\{fcpts_suite,(.*?)\n\}", README.read_text(), re.S).group(1)
    assert f"version = {{{version}}}" in citation, (version, citation)
