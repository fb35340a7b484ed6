"""Named parameter profiles: YAML files of overrides in ``profiles/`` applied onto ``params.yaml``.

    factrl profile tiny        # CI: the whole pipeline in a few minutes
    factrl profile long        # make demo-long: more rounds of learning (at most ~3 hours on 2 cores)
    factrl profile hard        # the hard demo world: namesakes, wordings, near misses (issue 38)
    factrl profile paper       # the HARIS paper's settings (GPU scale)

A profile is a partial params file: mappings merge key by key, anything else (lists, scalars)
replaces the value, and so does a profile's ``rounds`` (the whole schedule: a profile with two
rounds leaves two, not the default's plus its own). The merged file is validated section by section (the same
loader the stages use) before it is written, atomically and with params.yaml's comments kept. The
default params.yaml is the 2-core demo profile; `git checkout params.yaml` returns to it.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

from factrl.config import PARAMS_FILE, ConfigError
from factrl.io import atomic_path
from factrl.sections import all_sections, load_any

PROFILES_DIR = Path("profiles")


def _yaml():
    from ruamel.yaml import YAML  # round-trip YAML (keeps comments); installed with DVC

    y = YAML()
    y.preserve_quotes = True
    y.width = 120
    return y


def read_profile(name_or_path: str | Path, profiles_dir: Path = PROFILES_DIR) -> dict[str, Any]:
    """The overrides of a profile given by name (``profiles/<name>.yaml``) or path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = profiles_dir / f"{name_or_path}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in profiles_dir.glob("*.yaml"))
        raise ConfigError(f"{path}: no such profile; known: {known}")
    data = _yaml().load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a profile must be a mapping of params sections")
    known = set(all_sections())
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {sorted(unknown)}; known: {sorted(known)}")
    return data


def merge(base: Any, override: Any) -> Any:
    """``override`` onto ``base`` in place: mappings merge recursively, everything else replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        for key, value in override.items():
            base[key] = merge(base[key], value) if key in base else value
        return base
    return override


def apply_profile(name_or_path: str | Path, params_file: str | Path = PARAMS_FILE,
                  profiles_dir: Path = PROFILES_DIR) -> dict[str, Any]:
    """Merge a profile into ``params_file``; every section must still load. Returns the merged data."""
    params_file = Path(params_file)
    data = _yaml().load(params_file.read_text(encoding="utf-8"))
    profile = read_profile(name_or_path, profiles_dir)
    for section in [s for s in profile if getattr(all_sections().get(s), "MAP_FIELD", None) and s in data]:
        data[section] = profile.pop(section)  # keyed collections (rounds) are replaced whole
    merge(data, profile)
    write_params(data, params_file)
    return data


def write_params(data: dict[str, Any], params_file: str | Path) -> Path:
    """Write ``data`` (params sections) as YAML to ``params_file``, atomically, once every section
    loads (a section that does not load raises :class:`ConfigError` and leaves the file as it was)."""
    buf = io.StringIO()
    _yaml().dump(data, buf)
    with atomic_path(Path(params_file)) as tmp:
        tmp.write_text(buf.getvalue(), encoding="utf-8")
        for section in data:  # validate before the rename makes it visible
            load_any(section, tmp)
    return Path(params_file)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="factrl profile", description="apply a profile of params overrides")
    ap.add_argument("profile", help="a name in profiles/ (tiny, long, hard, paper) or a YAML path")
    ap.add_argument("--params", default=PARAMS_FILE)
    args = ap.parse_args(argv)
    apply_profile(args.profile, args.params)
    print(f"{args.params}: profile {args.profile} applied")
    return 0
