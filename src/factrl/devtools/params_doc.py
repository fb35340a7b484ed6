"""The params reference, ``docs/params-reference.md``, generated from the registered section dataclasses.

    python -m factrl.devtools.params_doc --write   # rewrite the page
    python -m factrl.devtools.params_doc --check   # exit 1 when the page is not what the code says

Every section (``factrl.sections.all_sections``) gets a table of its keys: type, default and the
meaning its dataclass's docstring gives (``name: meaning`` lines); a nested dataclass gets a table of
its own, linked from the key that holds it. A field that the docstring does not describe is listed
as such (``--check`` fails on it too), so the page is the one place to read every key and it cannot
fall behind the code.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

from factrl.config import registry_names
from factrl.sections import all_sections

PAGE = Path("docs/params-reference.md")
_ENTRY = re.compile(r"^([a-z_][a-z0-9_]*(?:\s*/\s*[a-z_][a-z0-9_]*)*):\s+(.*)$")


def field_docs(cls: type) -> dict[str, str]:
    """``field name -> meaning`` from the ``name: meaning`` lines of ``cls``'s docstring (a line that
    names several fields, ``a / b: ...``, describes each; indented lines continue an entry)."""
    docs: dict[str, str] = {}
    current: list[str] = []
    for line in inspect.cleandoc(cls.__doc__ or "").splitlines():
        stripped = line.strip()
        match = _ENTRY.match(line)  # an entry starts at the docstring's margin
        if match:
            current = [n.strip() for n in match.group(1).split("/")]
            for name in current:
                docs[name] = match.group(2)
        elif stripped and current and line.startswith(" "):
            for name in current:
                docs[name] += " " + stripped
        else:
            current = []
    return docs


def type_name(tp: Any) -> str:
    """A type as a reader writes it in YAML terms: ``str``, ``int | null``, ``list[EvalSetParams]``, ``one of ...``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join("null" if a is type(None) else type_name(a) for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list[{type_name(args[0])}]"
        return f"list of {len(args)}: {', '.join(type_name(a) for a in args)}"
    if dataclasses.is_dataclass(tp):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    return getattr(tp, "__name__", str(tp))


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "see its table" if value == type(value)() else "its table, changed: " + ", ".join(
            f"`{k}: {v!r}`" for k, v in dataclasses.asdict(value).items() if v != getattr(type(value)(), k))
    if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
        return f"{len(value)} entries (params.yaml)"
    return f"`{list(value) if isinstance(value, tuple) else value!r}`".replace("|", "\\|")


def _nested(tp: Any) -> list[type]:
    if dataclasses.is_dataclass(tp):
        return [tp]
    return [c for a in typing.get_args(tp) for c in _nested(a)]


def table(cls: type, undocumented: list[str]) -> tuple[list[str], list[type]]:
    """The markdown rows of ``cls``'s table, and the dataclasses its fields hold."""
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    bases = [b for b in cls.__bases__ if dataclasses.is_dataclass(b)]
    nested: list[type] = list(bases)
    own = set(vars(cls).get("__annotations__", {}))  # an inherited key is in its base's table
    for f in (f for f in dataclasses.fields(cls) if f.name in own):
        kind = type_name(hints[f.name])
        if "names" in f.metadata:
            names = registry_names(f.metadata)
            kind += f": one of {', '.join(f'`{n}`' for n in sorted(names))}" + (
                f" (or with `{f.metadata['suffix']}`)" if f.metadata["suffix"] else "")
        meaning = docs.get(f.name, "")
        if not meaning:
            undocumented.append(f"{cls.__module__}.{cls.__qualname__}.{f.name}")
        rows.append(f"| `{f.name}` | {kind} | {_default(f)} | {meaning.replace('|', chr(92) + '|')} |")
        nested += _nested(hints[f.name])
    if bases:
        rows.append("| | | | and every key of " + ", ".join(f"[{b.__name__}](#{b.__name__.lower()})" for b in bases)
                    + ", flat |")
    return rows, nested


def render() -> tuple[str, list[str]]:
    """The page, and the fields no docstring describes."""
    sections = all_sections()
    out = ["# Params reference", "",
           "Generated by `python -m factrl.devtools.params_doc --write` from the section dataclasses (do not edit;",
           "`tests/devtools/test_params_doc.py` fails when it is stale). How the file is organised, profiles and",
           "what an edit reruns: [parameters.md](parameters.md). Defaults are the dataclasses'; `params.yaml` and",
           "the profiles set their own values.", "",
           "| section | dataclass | module |", "|---|---|---|"]
    out += [f"| `{key}` | [{cls.__name__}](#{cls.__name__.lower()}) | `{cls.__module__}` |" for key, cls in sections.items()]
    undocumented: list[str] = []
    done: set[type] = set()
    todo = [(f"`{key}`", cls) for key, cls in sections.items()]
    while todo:
        where, cls = todo.pop(0)
        if cls in done:
            continue
        done.add(cls)
        rows, nested = table(cls, undocumented)
        summary = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        summary = re.sub(r"\s+", " ", summary)
        out += ["", f"## {cls.__name__}", "", f"{where}, `{cls.__module__}`. {summary}", "", *rows]
        todo += [(f"in {cls.__name__}", n) for n in nested if n not in done]
    return "\n".join(out) + "\n", undocumented


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"rewrite {PAGE}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 when {PAGE} is stale")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: .)")
    args = parser.parse_args(argv)
    page, undocumented = render()
    path = args.root / PAGE
    for name in undocumented:
        print(f"{name}: no `name: meaning` line in its dataclass's docstring", file=sys.stderr)
    if args.write:
        path.write_text(page, encoding="utf-8")
        print(f"wrote {path}")
        return 1 if undocumented else 0
    if not path.is_file() or path.read_text(encoding="utf-8") != page:
        print(f"{path} is stale: run python -m factrl.devtools.params_doc --write", file=sys.stderr)
        return 1
    return 1 if undocumented else 0


if __name__ == "__main__":
    raise SystemExit(main())
