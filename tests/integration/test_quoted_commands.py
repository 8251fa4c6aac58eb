"""Every `python -m ...` command the README and the docs quote exists: each answers `--help` with exit status 0
(a renamed or removed module, or a subcommand that is gone, fails here instead of in a reader's shell). Each runs
as `python -m` runs it (runpy, as __main__), in this process, so torch is imported once for all of them."""

from __future__ import annotations

import re
import runpy
import sys
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

import pytest

from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]
# A module path that ends a command (not `python -m tasks.<task>`), and the word after it, which is a subcommand
# when the module's own help names it.
COMMAND = re.compile(r"python -m ([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?![\w.<])(?: ([a-z][a-z_-]*))?")


def quoted_commands() -> list[tuple[str, str | None]]:
    """The commands the README and docs tell a reader to run; a quoted output's provenance line (`command: ...`)
    says what ran when the output was made, under the module names of then, and is left out."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    lines = [line for path in texts if path.is_file() for line in path.read_text().splitlines()]
    found = {m.groups() for line in lines if not line.startswith("command: ") for m in COMMAND.finditer(line)}
    return sorted(found, key=lambda c: (c[0], c[1] or ""))


def help_of(module: str, *args: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m module *args --help`."""
    out, err = StringIO(), StringIO()
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [module, *args, "--help"])
    code: int | str | None = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            code = stop.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out.getvalue(), err.getvalue()


MODULES = sorted({module for module, _ in quoted_commands()})


def test_the_docs_quote_commands():
    assert {"tasks.cifar", "tasks.imagenet", "tasks.voc", "tasks.reporting"} <= set(MODULES)


@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import:RuntimeWarning")  # imported by other tests
@pytest.mark.parametrize("module", MODULES)
def test_every_quoted_command_answers_help(module, monkeypatch):
    code, usage, err = help_of(module, monkeypatch=monkeypatch)
    if module.startswith("tasks.voc.mmdet") and not IN_CI:
        from tasks.voc.mmdet import INSTALL_HINT, missing

        if missing() is not None:  # without the extra: exit 2 naming what is missing and the fix, no traceback
            assert code == 2 and INSTALL_HINT in err and "Traceback" not in err, err[-500:]
            return
    assert code == 0, f"python -m {module} --help exited {code}: {err[-500:]}"
    for word in sorted({w for m, w in quoted_commands() if m == module and w}):
        if re.search(rf"[{{,]{re.escape(word)}[}},]|^\s+{re.escape(word)}\b", usage, re.MULTILINE):
            code, _, err = help_of(module, word, monkeypatch=monkeypatch)
            assert code == 0, f"python -m {module} {word} --help exited {code}: {err[-500:]}"
