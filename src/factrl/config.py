"""The params loader: reads ``params.yaml`` into the frozen dataclass of each section, validated.

Each section's dataclass lives beside the code that reads it (``factrl.rl.params.GRPOParams`` beside
the trainer, ``factrl.data.params.PrepareParams`` beside the world, ...) and registers itself here
under its params key with :func:`params_section`; this module names no section. A stage imports the
dataclass it reads, so its import closure (and its DVC dependencies, ``factrl.devtools.deps``) holds
its own params module and this loader, not every other section's. ``factrl.sections`` imports every
params module, for what needs them all (profiles, the generated reference ``docs/parameters.md``).

Unknown keys, wrong types and missing required keys are :class:`ConfigError` naming the file and the
dotted key; nothing else in factrl parses ``params.yaml``. Nested dataclasses load recursively, tuples
from YAML lists; a field made by :func:`names_from` accepts the names of a registry, checked at load.

This module imports the standard library alone (and ruamel.yaml where a file is read), so the modules
of the GPU code path can import their params on a machine with torch and transformers only.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from factrl.devices import DEVICE_PATTERN

PARAMS_FILE = "params.yaml"

Device = typing.NewType("Device", str)
"""A ``device`` setting: ``auto`` (CUDA when visible, else CPU), ``cpu``, ``cuda`` or ``cuda:N``
(checked against :data:`factrl.devices.DEVICE_PATTERN` when params load, resolved by
:func:`factrl.hardware.resolve_device` where the model loads)."""

SECTIONS: dict[str, type] = {}
"""Params key -> its dataclass, filled by :func:`params_section` as the params modules import
(``factrl.sections.all_sections`` imports them all)."""

C = TypeVar("C", bound=type)


class ConfigError(ValueError):
    """A params file that does not match its dataclass (names file and dotted key)."""


def params_section(key: str) -> Callable[[C], C]:
    """Class decorator registering a frozen dataclass as the section ``key`` of params.yaml.

    A section whose YAML is a mapping of id -> entry (``rounds``) names the field that holds the
    entries as ``MAP_FIELD``. A second class under a taken key is an error (two modules would each
    think they own the section)."""

    def register(cls: C) -> C:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"params section {key!r}: {cls.__qualname__} is not a dataclass")
        owner = SECTIONS.get(key)
        if owner is not None and owner.__qualname__ != cls.__qualname__:
            raise ValueError(f"params section {key!r} is already {owner.__module__}.{owner.__qualname__}")
        SECTIONS[key] = cls
        cls.PARAMS_KEY = key
        return cls

    return register


def names_from(registry: Collection[str] | Callable[[], Collection[str]], default: Any, *, suffix: str = "") -> Any:
    """A field whose value (a ``str``, or each item of a ``tuple[str, ...]``) must be a name of ``registry``
    (a :class:`factrl.registry.Registry`, any mapping or collection of names, or a function returning
    one, for a registry whose module is heavy to import), checked when params load, so the allowed
    names are the registry's, not a second list. ``suffix``: an optional decoration of a name (the KL
    estimators' ``+``)."""
    return dataclasses.field(default=default, metadata={"names": registry, "suffix": suffix})


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def read_params(path: str | Path = PARAMS_FILE) -> dict[str, Any]:
    """Read the raw params mapping from YAML (errors name the file).

    YAML 1.2, as DVC reads params.yaml (ruamel.yaml), so a stage sees the values DVC hashes:
    PyYAML's YAML 1.1 would read ``lr: 1e-5`` as a string and ``on`` / ``yes`` as booleans."""
    # imported here, not at the top: the GPU code path imports its dataclasses without a YAML package
    from ruamel.yaml import YAML, YAMLError

    path = Path(path)
    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: params file not found") from None
    except YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    return data


def load_section(section: str | type, path: str | Path = PARAMS_FILE) -> Any:
    """Load a section of the params file into its dataclass: ``section`` is the dataclass (preferred:
    the caller's import of it is its dependency) or its params key, registered once its module has
    been imported."""
    if isinstance(section, str):
        if section not in SECTIONS:
            raise ConfigError(f"params section {section!r} is not registered (import its params module, or "
                              f"factrl.sections.all_sections()); registered: {sorted(SECTIONS)}")
        cls = SECTIONS[section]
    else:
        cls = section
    name = vars(cls).get("PARAMS_KEY")  # its own: a subclass of a section is no section
    if name is None:
        raise TypeError(f"{cls.__qualname__} is not a params section (no @params_section)")
    raw = read_params(path).get(name, {})
    map_field = getattr(cls, "MAP_FIELD", None)
    if map_field:  # a section that is a mapping of id -> entry (e.g. rounds)
        raw = {map_field: _keyed_entries(raw, f"{path}:{name}")}
    return from_dict(cls, raw, where=f"{path}:{name}")


def _keyed_entries(raw: Any, where: str) -> list[dict]:
    """``{"id": {fields}}`` -> ``[{id, fields}]`` in id order; ids are quoted positive integers."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of id -> entry (e.g. `\"1\": {{prev: 0, ...}}`), "
                          f"got {type(raw).__name__}")
    entries = []
    for key, entry in raw.items():
        if not isinstance(key, str):
            # DVC's foreach silently drops every stage of a mapping with bare integer keys
            raise ConfigError(f'{where}.{key}: quote the id ("{key}": ...): DVC ignores foreach '
                              "stages keyed by bare integers")
        if not key.isdigit() or int(key) < 1:
            raise ConfigError(f"{where}.{key}: the key must be a round id (a positive integer)")
        ident = int(key)
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}.{key}: expected a mapping, got {type(entry).__name__}")
        if "id" in entry:
            raise ConfigError(f"{where}.{key}: unknown key 'id' (the id is the entry's key)")
        entries.append({"id": ident, **entry})
    return sorted(entries, key=lambda e: e["id"])


def from_dict(cls: type, raw: Any, where: str) -> Any:
    """Build dataclass ``cls`` from a mapping, checking keys, types and registry names recursively."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(raw) - set(fields)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(fields)}")
    values = {}
    for name, f in fields.items():
        if name in raw:
            values[name] = _coerce(hints[name], raw[name], f"{where}.{name}")
            if "names" in f.metadata:
                _check_name(f.metadata, values[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}.{name}: required key is missing")
    return cls(**values)


def registry_names(metadata: Mapping[str, Any]) -> Collection[str]:
    """The names a :func:`names_from` field accepts (from its ``dataclasses.field`` metadata)."""
    registry = metadata["names"]
    return registry() if callable(registry) else registry


def _check_name(metadata: Mapping[str, Any], value: Any, where: str) -> None:
    registry, suffix = registry_names(metadata), metadata["suffix"]
    for i, name in enumerate(value) if isinstance(value, tuple) else [(None, value)]:
        if (name[: -len(suffix)] if suffix and name.endswith(suffix) else name) not in registry:
            kind = getattr(registry, "kind", "name")
            decorated = f" (optionally ending in {suffix!r})" if suffix else ""
            key = where if i is None else f"{where}[{i}]"
            raise ConfigError(f"{key}: {name!r} is not a registered {kind}; "
                              f"use one of {sorted(registry)}{decorated}")


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: {value!r} matches none of {args}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(_coerce(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return {k: _coerce(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is Device:
        if not isinstance(value, str) or not DEVICE_PATTERN.fullmatch(value):
            raise ConfigError(f"{where}: {value!r} is not a device; use auto, cpu, cuda or cuda:N")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported field type {tp!r}")  # a programming error in a params dataclass


def to_dict(obj: Any) -> dict[str, Any]:
    """A dataclass as plain YAML-friendly data (tuples become lists)."""

    def plain(v: Any) -> Any:
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return {k: plain(v) for k, v in dataclasses.asdict(obj).items()}
