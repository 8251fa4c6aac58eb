"""The methods FCPTS is compared with, re-implemented; each module registers its methods into `fcpts`'s registry,
which imports this package the first time it is read (`fcpts` itself never does)."""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
