"""`python -m tasks.reporting tables|figures|site|manifest`: everything users read, regenerated from records."""

import sys

from tasks.reporting import figures, paper

argv = sys.argv[1:]
if argv[:1] == ["figures"]:
    sys.exit(figures.main(argv[1:]))
if argv[:1] == ["site"]:
    from tasks.reporting import site

    sys.exit(site.main(argv[1:]))
sys.exit(paper.main(argv))
