"""Every section of params.yaml: imports the modules that declare one, for the code that needs them all.

A stage imports the one dataclass it reads (its dependency); profiles (which validate a whole params
file), the generated reference ``docs/parameters.md`` and the params tests need every section. The
modules are found by what they contain (``@params_section(`` at the start of a line), not by a list,
so a new section is found where it is declared. No stage imports this module: it imports by computed
name, which ``factrl.devtools.deps`` cannot follow.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

from factrl.config import PARAMS_FILE, SECTIONS, load_section

PACKAGE_DIR = Path(__file__).resolve().parent
_DECLARES = re.compile(r"^@params_section\(", re.MULTILINE)


def params_modules() -> list[str]:
    """Dotted names of the ``factrl`` modules that declare a params section, sorted."""
    names = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if _DECLARES.search(path.read_text(encoding="utf-8")):
            rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
            names.append(".".join(rel.parts))
    return names


def all_sections() -> dict[str, type]:
    """Params key -> dataclass of every section, after importing every module that declares one."""
    for name in params_modules():
        importlib.import_module(name)
    return dict(sorted(SECTIONS.items()))


def load_any(name: str, path: str | Path = PARAMS_FILE) -> Any:
    """Section ``name`` of ``path`` loaded into its dataclass, whichever module declares it."""
    if name not in SECTIONS:
        all_sections()
    return load_section(name, path)
