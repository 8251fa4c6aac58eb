"""Everything users read, regenerated from the records: `python -m tasks.reporting COMMAND [options]`.

Each command reads the committed records (and the paper's reference numbers) and runs nothing;
`python -m tasks.reporting COMMAND --help` says what one writes and takes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tasks.grid.help import HelpFormatter, add_results_dir, command_parser, run_command
from tasks.grid.paths import REPO_ROOT, RESULTS_DIR, RUNS_DIR

PROG = "python -m tasks.reporting"


def parser() -> argparse.ArgumentParser:
    """One parser for every reporting command; each command imports what it needs only when it runs, so
    `--help` works without the optional packages (matplotlib for figures and the site)."""
    p = command_parser(PROG, __doc__)
    commands = p.add_subparsers(dest="command", required=True, metavar="{tables,manifest,figures,site,readme}")

    def command(name: str, job: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=job, description=job, formatter_class=HelpFormatter)

    command("tables", "write results/tables/: every table beside the paper's numbers")
    manifest = command(
        "manifest", "register the present records and their headline numbers in results/runs/MANIFEST.txt"
    )
    manifest.add_argument(
        "--refresh",
        nargs="*",
        default=[],
        metavar="RECORD",
        help="accept the current number of these records (paths relative to results/runs)",
    )
    figures = command(
        "figures",
        "write the paper's figures from the records (needs the [figures] extra); a figure that needs what is "
        "not here (Figure 3: a dense checkpoint) is skipped, saying so, and its committed file kept",
    )
    add_results_dir(figures, REPO_ROOT / "paper_figures", "where the figures go", "--out-dir")
    site = command("site", "write the browsable results site: tables, figures and a page per run (needs [figures])")
    add_results_dir(site, RESULTS_DIR / "site", "the site's folder, replaced", "--out")
    site.add_argument("--runs-dir", type=Path, default=RUNS_DIR, help="the records to show (default: results/runs/)")
    readme = command("readme", "rewrite the README's generated blocks (methods table, results summary)")
    readme.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1, saying so, if a generated block is stale (as CI would)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    try:
        if args.command == "tables":
            from tasks.reporting.paper import write_tables

            for path in write_tables():
                print(f"wrote {path.relative_to(REPO_ROOT)}")
        elif args.command == "manifest":
            from tasks.grid.records import MANIFEST, update_manifest

            entries = update_manifest(refresh=tuple(args.refresh))
            print(f"{len(entries)} records in {MANIFEST.relative_to(REPO_ROOT)}")
        elif args.command == "figures":
            from tasks.reporting.figures import write_figures

            for path in write_figures(
                out_dir=Path(args.results_dir), skipped=lambda line: print(line, file=sys.stderr)
            ):
                print(f"wrote {path}")
        elif args.command == "site":
            from tasks.reporting import site

            print(site.write_site(Path(args.results_dir), Path(args.runs_dir)))
        else:
            from tasks.reporting.readme import update

            return update(check=args.check)
    except ValueError as e:  # a damaged record (RecordError), a --refresh naming no record: one line
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(run_command(lambda: run(parser().parse_args())))
