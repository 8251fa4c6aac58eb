"""`python -m benchmarks NAME [ARGS...]` runs one declared measurement; `--list` names them (no torch imported)."""

from __future__ import annotations

import argparse
import importlib
import sys

from benchmarks import BENCHMARKS, parser


def listing() -> str:
    width = max(map(len, BENCHMARKS))
    rows = (f"{name:<{width}}  {b.measures}\n{'':<{width}}  guards: {b.guards}" for name, b in BENCHMARKS.items())
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    top = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run one of the suite's measurements; `python -m benchmarks NAME --help` for its options.",
        epilog="measurements:\n" + listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--list", action="store_true", help="name each measurement and what it guards, then exit")
    top.add_argument("name", nargs="?", choices=sorted(BENCHMARKS), metavar="NAME", help="the measurement to run")
    args = top.parse_args(argv[:1])
    if args.list or args.name is None:
        print(listing())
        return 0 if args.list else 2
    parser(args.name).parse_args(argv[1:])  # --help and bad flags answer here, before torch is imported
    # The module parses the same flags with the same parser; records name the command as typed.
    result = importlib.import_module(BENCHMARKS[args.name].module).main(argv[1:])
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
