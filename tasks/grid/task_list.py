"""`python -m tasks.grid tasks`: every task the suite has, as its driver declares it (command, datasets, models,
metrics, profiles), read from the task registry; nothing runs."""

from __future__ import annotations

import sys

from tasks.grid.help import command_parser
from tasks.grid.rerun import drivers, list_tasks


def table() -> str:
    tasks = list_tasks()
    lines = []
    for t in tasks:
        lines += [
            f"{t.name}: {t.command}",
            f"  datasets: {', '.join(t.datasets)}",
            f"  models:   {', '.join(t.models)}",
            f"  metrics:  {', '.join(t.metrics)}",
            f"  profiles: {', '.join(t.profiles)}",
        ]
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
