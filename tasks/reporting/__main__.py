"""`python -m tasks.reporting tables|figures|site|manifest|readme`: everything users read, regenerated from records."""

import sys

from tasks.reporting import figures, paper, readme

argv = sys.argv[1:]
if argv[:1] == ["figures"]:
    sys.exit(figures.main(argv[1:]))
if argv[:1] == ["readme"]:
    sys.exit(readme.main(argv[1:]))
if argv[:1] == ["site"]:
    from tasks.reporting import site

    sys.exit(site.main(argv[1:]))
sys.exit(paper.main(argv))
