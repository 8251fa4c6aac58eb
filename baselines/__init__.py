"""The methods FCPTS is compared with, re-implemented: POT (`pot`, its layer loss in `pot_objective`), STR
(`soft_threshold`), ProbMask (`probmask`), the magnitude allocations (`magnitude`), and OBS (`obs`, not in the
paper: a second-order one-shot comparison). Each module registers its methods into `fcpts`'s one registry and
imports only `fcpts.core` and that registry; `fcpts` never imports this package: its registry does, by name,
the first time it is read (`fcpts.methods.registry.method_packages`).
"""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
