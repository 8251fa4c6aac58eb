import sys

from tasks.grid.help import run_command


def main() -> int:
    from tasks.deploy.driver import main

    return main()


sys.exit(run_command(main))
