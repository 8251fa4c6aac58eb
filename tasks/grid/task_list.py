"""`python -m tasks.grid tasks`: every task the suite has, as its driver declares it (command, datasets, models,
metrics, profiles, what --all-methods runs), read from the task registry, and the methods --methods takes."""

from __future__ import annotations

import sys

from tasks.grid.help import command_parser
from tasks.grid.rerun import drivers, list_tasks


def all_methods_text(method_sets: tuple[str, ...]) -> str:
    """What `--all-methods` runs, from the registry: the paper's set, then any extras (not the paper's)."""
    from fcpts.methods import NOT_IN_PAPER, get_method
    from tasks.grid.layout import all_methods

    parts = []
    for name in method_sets:
        methods = all_methods(name)
        extras = [m for m in methods if get_method(m).role == NOT_IN_PAPER]
        paper = " ".join(m for m in methods if m not in extras)
        more = f", then beyond the paper (tables label them so): {' '.join(extras)}" if extras else ""
        parts.append(f"{name + ': ' if len(method_sets) > 1 else ''}the paper's set: {paper}{more}")
    return "; ".join(parts)


def table() -> str:
    from fcpts.methods import METHODS

    tasks = list_tasks()
    lines = [f"methods (--methods): {', '.join(sorted(METHODS))}"]
    for t in tasks:
        lines.append(f"{t.name}: {t.command.prog if t.command else ''}")
        lines += [
            f"  {key + ':':9s} {', '.join(getattr(t, key))}" for key in ("datasets", "models", "metrics", "profiles")
        ]
        if t.command:
            lines.append(f"  --all-methods: {all_methods_text(t.command.method_sets)}")
    missing = [name for name in drivers() if name not in {t.name for t in tasks}]
    if missing:
        lines.append(f"not importable here (an extra is missing): {', '.join(missing)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    command_parser("python -m tasks.grid tasks", __doc__).parse_args(argv)
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
