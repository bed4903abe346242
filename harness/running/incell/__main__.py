"""The file the harness starts in a cell: `python .../incell/__main__.py VERB ...` (the verbs: `main`).

Run by its path, never as a module of the harness: it loads its folder as the package
`harness_incell` (`load`), so the protocols import one another relatively and nothing of the
harness's folders is importable by a plain name. Standard library only.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

#: The package's name in the cell: no scenario or library imports a module of this name.
PACKAGE = "harness_incell"


def load() -> ModuleType:
    """This folder as the package `harness_incell` (once per process)."""
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE]
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(PACKAGE, os.path.join(here, "__init__.py"), submodule_search_locations=[here])
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    return package


if __name__ == "__main__":
    # Python put this file's folder first on sys.path; a scenario must see only the cell's
    # libraries, never the harness's modules.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    load()
    sys.exit(importlib.import_module(f"{PACKAGE}.main").main(sys.argv[1:]))
