import sys

from tasks.grid.help import run_command


def main() -> int:
    from tasks.grid.cli import main

    return main("imagenet")


sys.exit(run_command(main))
