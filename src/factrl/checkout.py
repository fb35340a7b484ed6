"""A factrl checkout's own entry points, found by path: what ``factrl prepare`` and ``factrl index``
run (the stage modules under ``stages/`` in the current directory).

The library never imports the repository's scripts (``stages/``, ``flows/`` are not installed with
factrl). The few commands whose whole job is to run one of a checkout's stages load it explicitly from
the current directory, as ``dvc repro`` runs it there, and stop with an error naming the directory
when it is not a checkout.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ENTRY_PACKAGES = ("stages", "flows")  # the checkout's entry-point packages (repository root)


class NotACheckoutError(RuntimeError):
    """The current directory is not the root of a factrl checkout."""


def require_checkout(command: str, *files: str, root: Path | None = None) -> Path:
    """The checkout root (default: the current directory), after checking it holds ``files``
    (paths relative to it); :class:`NotACheckoutError` naming the first missing one otherwise."""
    root = (root or Path.cwd()).resolve()
    for name in files:
        if not (root / name).is_file():
            raise NotACheckoutError(
                f"{command} runs {name} of a factrl checkout, but {root} has no {name}: run it from "
                f"the root of a factrl checkout (the directory holding dvc.yaml, stages/ and flows/)")
    return root


def entry_module(name: str, command: str, root: Path | None = None) -> ModuleType:
    """The checkout's module ``name`` (``stages.prepare``), loaded from ``root`` (default: the current
    directory) by path; :class:`NotACheckoutError` where the file is missing, or where another
    ``stages`` package was imported first."""
    package, _, rest = name.partition(".")
    if package not in ENTRY_PACKAGES or not rest:
        raise ValueError(f"{name!r} is not a module of a checkout's {' or '.join(ENTRY_PACKAGES)}")
    root = require_checkout(command, f"{package}/{rest.replace('.', '/')}.py", f"{package}/__init__.py", root=root)
    loaded = sys.modules.get(package)
    if loaded is None:
        where = (root / package).resolve()
        spec = importlib.util.spec_from_file_location(
            package, where / "__init__.py", submodule_search_locations=[str(where)])
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[package] = loaded
        spec.loader.exec_module(loaded)
    elif Path(loaded.__file__ or "").resolve().parent != (root / package).resolve():
        raise NotACheckoutError(f"{command}: a {package} package from {loaded.__file__} is already imported, "
                                f"not the one of {root}")
    return importlib.import_module(name)
