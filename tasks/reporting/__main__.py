"""`python -m tasks.reporting tables|manifest|figures|site|readme`: everything users read, regenerated from records."""

import sys

COMMANDS = {
    "tables": "write results/tables/ (every table beside the paper's numbers)",
    "manifest": "register the present records and their headline numbers in results/runs/MANIFEST.txt",
    "figures": "write paper_figures/",
    "site": "write the browsable results site, results/site/",
    "readme": "rewrite the README's generated blocks (methods, results summary)",
}


def main(argv: list[str]) -> int:
    what = argv[0] if argv else None
    if what not in COMMANDS:
        listing = "\n".join(f"  {name:9s} {job}" for name, job in COMMANDS.items())
        usage = f"usage: python -m tasks.reporting {{{','.join(COMMANDS)}}} [options]\n\n{listing}\n"
        if what in ("-h", "--help"):
            print(usage, end="")
            return 0
        said = f"unknown command {what!r}" if what else "name a command"
        print(f"{usage}python -m tasks.reporting: error: {said}", file=sys.stderr)
        return 2
    if what == "figures":
        from tasks.reporting import figures

        return figures.main(argv[1:])
    if what == "readme":
        from tasks.reporting import readme

        return readme.main(argv[1:])
    if what == "site":
        from tasks.reporting import site

        return site.main(argv[1:])
    from tasks.reporting import paper

    return paper.main(argv)


sys.exit(main(sys.argv[1:]))
