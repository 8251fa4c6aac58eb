import sys

from tasks.grid.help import run_command


def main() -> int:
    from tasks.imagenet.grid import main

    return main()


sys.exit(run_command(main))
