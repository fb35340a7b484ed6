"""Each DVC stage's code dependencies are exactly the repository files its entry point imports.

    python -m factrl.devtools.deps --check        # each disagreement with the closures; exit 1 if any
    python -m factrl.devtools.deps --write        # rewrite dvc.yaml's code deps (comments kept)
    python -m factrl.devtools.deps --show warmup  # one stage's closure, one file a line
    python -m factrl.devtools.deps --cycles       # import circles among src/factrl's modules; exit 1 if any
    python -m factrl.devtools.deps --layers       # circles and imports against the layer order; exit 1 if any

``--root DIR`` names the repository (default: the current directory, where ``dvc repro`` runs).

**Entry point.** The module or script that the stage's ``cmd`` runs with Python: ``python -m
stages.warmup ...`` (the module ``stages.warmup``; Python runs ``stages/__init__.py`` first) or
``python stages/x.py ...`` (the file). A ``foreach`` / ``matrix`` stage has one ``cmd`` template for
all its stages (``train_search@1``, ``train_search@2``, ...): its closure is computed once, from the
template, and reported under ``train_search@*``; so an empty ``foreach`` (``train_march`` with no
seeds) is still checked.

**Import closure.** The files under ``stages/``, ``flows/`` and ``src/factrl/`` that running the entry
point can import, followed recursively, found statically with :mod:`ast`:

* every ``import`` and ``from ... import`` statement anywhere in a module: at module level, inside
  functions and methods, in ``try`` / ``except`` blocks; absolute and relative (``from . import x``);
* ``from pkg import name`` adds ``pkg/name.py`` (or ``pkg/name/__init__.py``) where ``name`` is a
  submodule, and only ``pkg`` where it is an attribute;
* importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first: they are in the closure;
* except the bodies of ``if TYPE_CHECKING:`` (annotations only; they never run);
* modules resolve as the stage resolves them: ``factrl`` from ``src/``, ``stages`` and ``flows`` from
  the repository root; a module that is not a file of this repository (standard library, installed
  packages) ends the walk.

The closure over-approximates one run (a function-level import on a branch this run does not take
still counts: the next run, with other params, may take it), which is what a dependency must do.

**Dynamic imports.** No stage imports a module by a computed name in its own process: ``importlib`` is
used only by the ``factrl`` CLI's command table (``cli.py``), by ``factrl train``
(``recipes/train_cli.py``) and by ``factrl.sections`` (every params module, for profiles and the params
reference), and no stage's closure reaches any of them (a stage imports the params dataclass it reads). What a stage runs *by name in another
process* (a ``python -m factrl.cli <command>`` server it starts, a dotted class path it hands to verl)
is code the stage depends on that ``ast`` cannot see; :data:`DYNAMIC_IMPORTS` lists it, keyed by the
module that names it, and the closure follows those entries like imports. A new ``importlib`` call, ``-m``
subprocess or dotted-name reference that a stage reaches belongs in that table (the check cannot find
it otherwise).

**Import circles** (``--cycles``, :func:`import_cycles`): the strongly connected components of the
import graph of ``src/factrl`` built from the same statements (function-level imports included: a
lazy import hides a circle from Python, not from a reader), one edge per imported module; the implicit
import of a parent package is not an edge (``pkg/__init__.py`` importing ``pkg.sub`` that imports
``pkg.other`` is no circle).

**Layers** (``--layers``, :func:`layer_breaks`): the layer order is written once, as the ``layers``
block of ``docs/design.md`` (its module layout): one line per layer, lowest first, ``name: units``,
where a unit is a top-level module or package of ``src/factrl``. A module may import modules of its own
unit and of units in lower layers only; an import of a peer in the same layer or of a higher layer is a
break, reported with both files, and so is a unit the order does not place. The graph is the circle
check's (the same statements, ``if TYPE_CHECKING:`` left out); what a module starts *by name in another
process* (:data:`DYNAMIC_IMPORTS`) is no import and no break. ``--layers`` prints the circles too.

**Code deps and the rest.** A dep of ``dvc.yaml`` is code when it lies under ``stages/``, ``flows/`` or
``src/factrl/`` and is a ``.py`` file or a directory: code deps must equal the closure, file by file
(a directory is reported as extra: ``--write`` replaces it by the files). Every other dep (``data/``,
``index``, ``models/...``, ``segments/...``; params are the stage's ``params:`` entries) is kept as
written, after the sorted code deps.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import shlex
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CODE_ROOTS = ("stages", "flows", "src/factrl")  # the repository's code: deps under these are generated
SOURCE_ROOTS = ("", "src")  # where top-level modules are found (stages, flows at the root; factrl in src)

# Modules a stage runs by name, outside what ``import`` statements say (see the module docstring):
# module -> the modules it makes run.
DYNAMIC_IMPORTS: dict[str, tuple[str, ...]] = {
    # plan() starts the retriever as `python -m factrl.cli serve-retriever` (cli.COMMANDS names
    # factrl.retrieval.server) and hands verl the agent loops, tools and reward of haris.verl_loops as dotted
    # paths (AGENTS, REWARD_MODULE).
    "factrl.recipes.haris.verl_rounds": ("factrl.cli", "factrl.retrieval.server", "factrl.recipes.haris.verl_loops"),
    # spawn_server() runs `python -m factrl.cli serve-llm`, which cli.COMMANDS maps to factrl.llm.serve.
    "factrl.llm.serve": ("factrl.cli", "factrl.llm.serve"),
}


@dataclass(frozen=True)
class Module:
    """A module of the repository: its dotted name, its file (relative to the root), whether a package."""

    name: str
    path: Path
    package: bool


class Resolver:
    """Finds the repository's modules by name and the modules each one imports (parsed once)."""

    def __init__(self, root: Path, cache: dict[tuple[Path, str], set[str]] | None = None) -> None:
        self.root = root.resolve()
        self.search = [self.root / r for r in SOURCE_ROOTS]
        self.code = [self.root / r for r in CODE_ROOTS]
        self._imports = {} if cache is None else cache  # (file, module name) -> imported names

    def find(self, name: str) -> Module | None:
        """The repository module ``name``, or None where it is not a file under a code root."""
        parts = name.split(".")
        for base in self.search:
            for path, package in ((base.joinpath(*parts, "__init__.py"), True),
                                  (base.joinpath(*parts[:-1], parts[-1] + ".py"), False)):
                if path.is_file():
                    if not any(path.is_relative_to(c) for c in self.code):
                        return None  # found outside the code roots (an installed module, a test helper)
                    return Module(name, path.relative_to(self.root), package)
        return None

    def module_at(self, path: Path) -> Module:
        """The module a file under a source root is imported as."""
        path = path.resolve()
        base = max((b for b in self.search if path.is_relative_to(b)), key=lambda b: len(b.parts))
        parts = list(path.relative_to(base).with_suffix("").parts)
        package = parts[-1] == "__init__"
        return Module(".".join(parts[:-1] if package else parts), path.relative_to(self.root), package)

    def with_parents(self, name: str) -> list[Module]:
        """``name``'s module and the packages above it that Python runs first (those in the repository)."""
        parts = name.split(".")
        found = [self.find(".".join(parts[:i])) for i in range(1, len(parts) + 1)]
        return [m for m in found if m is not None]

    def imports(self, module: Module) -> set[str]:
        """The absolute names of every module ``module`` may import (its statements, see the docstring)."""
        key = (self.root / module.path, module.name)
        if key not in self._imports:
            tree = ast.parse(key[0].read_text(encoding="utf-8"), str(module.path))
            self._imports[key] = set(_imported_names(tree, module))
        return self._imports[key]

    def closure(self, entries: Iterable[Module]) -> set[Path]:
        """The files of ``entries`` and of everything they import, recursively (with DYNAMIC_IMPORTS)."""
        seen: dict[Path, Module] = {}
        todo = list(entries)
        while todo:
            module = todo.pop()
            if module.path in seen:
                continue
            seen[module.path] = module
            for name in sorted(self.imports(module) | set(DYNAMIC_IMPORTS.get(module.name, ()))):
                todo.extend(self.with_parents(name))
        return set(seen)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree``, skipping the bodies of ``if TYPE_CHECKING:`` (their ``else`` runs)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _imported_names(tree: ast.AST, module: Module) -> Iterator[str]:
    """Absolute dotted names that ``module``'s import statements may load: for ``from pkg import x``
    both ``pkg`` and ``pkg.x`` (the resolver keeps ``pkg.x`` only where it is a module)."""
    package = module.name if module.package else module.name.rpartition(".")[0]
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts):
                    raise ValueError(f"{module.path}:{node.lineno}: relative import beyond the top package")
                base = ".".join(parts[:len(parts) - (node.level - 1)])
                base = ".".join(p for p in (base, node.module or "") if p)
            else:
                base = node.module or ""
            if base:
                yield base
            for alias in node.names:
                if alias.name != "*":
                    yield f"{base}.{alias.name}" if base else alias.name


def entry_point(cmd: str | list[str], resolver: Resolver) -> list[Module]:
    """The modules a stage's ``cmd`` runs with Python (``-m module`` or ``script.py``), with their
    packages."""
    commands = [cmd] if isinstance(cmd, str) else list(cmd)
    found: list[Module] = []
    for command in commands:
        words = shlex.split(command)
        for i, word in enumerate(words):
            if not Path(word).name.startswith("python") or i + 1 >= len(words):
                continue
            target = words[i + 1:]
            if target[0] == "-m" and len(target) > 1:
                if "$" in target[1]:
                    raise ValueError(f"cmd {command!r}: the module name is templated; not supported")
                modules = resolver.with_parents(target[1])
                if not modules or modules[-1].name != target[1]:
                    raise ValueError(f"cmd {command!r}: module {target[1]} is not a file of this repository")
                found += modules
            elif target[0].endswith(".py"):
                path = (resolver.root / target[0]).resolve()
                if not path.is_file():
                    raise ValueError(f"cmd {command!r}: no script {target[0]}")
                # a script runs as __main__ with its own directory first on sys.path
                found.append(Module("__main__", path.relative_to(resolver.root), False))
                resolver.search.insert(0, path.parent)
    if not found:
        raise ValueError(f"cmd {cmd!r}: no `python -m module` or `python script.py` in it")
    return found


@dataclass
class Stage:
    """One stage of dvc.yaml, or one foreach / matrix template (``label`` ``name@*``)."""

    name: str
    label: str
    body: dict  # the mapping holding cmd and deps (``do`` of a foreach)


def stages(doc: dict) -> list[Stage]:
    out = []
    for name, stage in (doc.get("stages") or {}).items():
        if "foreach" in stage:
            out.append(Stage(name, f"{name}@*", stage["do"]))
        elif "matrix" in stage:
            out.append(Stage(name, f"{name}@*", stage))
        else:
            out.append(Stage(name, name, stage))
        if "wdir" in out[-1].body:
            raise ValueError(f"stage {name}: wdir is not supported (deps are read relative to the root)")
    return out


def is_code(dep: str, root: Path) -> bool:
    """Whether ``dep`` (a path of dvc.yaml) is code: under a code root and a .py file or a directory."""
    if "$" in dep:
        return False
    path = Path(dep)
    if not any(path == Path(r) or path.is_relative_to(r) for r in CODE_ROOTS):
        return False
    return path.suffix == ".py" or (root / path).is_dir()


def dep_path(dep: object) -> str:
    """A deps entry's path (an entry may be a mapping ``{path: options}``)."""
    return next(iter(dep)) if isinstance(dep, dict) else str(dep)


def stage_closure(stage: Stage, root: Path, cache: dict | None = None) -> list[str]:
    """The stage's import closure, as sorted repository-relative paths (``cache``: parsed imports,
    shared between the stages of one run)."""
    resolver = Resolver(root, cache)
    return sorted(p.as_posix() for p in resolver.closure(entry_point(stage.body["cmd"], resolver)))


def load(path: Path) -> tuple[Any, Any]:
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096  # never fold a long line
    yaml.preserve_quotes = True
    return yaml, yaml.load(path.read_text(encoding="utf-8"))


def check(root: Path, dvc_yaml: Path | None = None) -> list[str]:
    """Every disagreement of ``dvc_yaml`` (default ``root/dvc.yaml``) with the closures, one line each."""
    _, doc = load(dvc_yaml or root / "dvc.yaml")
    problems: list[str] = []
    cache: dict = {}
    for stage in stages(doc):
        want = set(stage_closure(stage, root, cache))
        have = {dep_path(d) for d in stage.body.get("deps") or [] if is_code(dep_path(d), root)}
        for path in sorted(want - have):
            problems.append(f"{stage.label}: missing {path} (imported by its entry point)")
        for path in sorted(have - want):
            why = "a directory: list the files it imports" if (root / path).is_dir() else "not imported"
            problems.append(f"{stage.label}: extra {path} ({why})")
    return problems


def write(root: Path, dvc_yaml: Path | None = None) -> list[str]:
    """Rewrite the code deps of every stage of ``dvc_yaml`` to its closure (sorted, before the other
    deps, which keep their order and comments); the labels of the stages changed."""
    from ruamel.yaml.comments import CommentedSeq

    path = dvc_yaml or root / "dvc.yaml"
    yaml, doc = load(path)
    changed = []
    cache: dict = {}
    for stage in stages(doc):
        old = stage.body.get("deps") or CommentedSeq()
        kept = [(i, d) for i, d in enumerate(old) if not is_code(dep_path(d), root)]
        new_items = [*stage_closure(stage, root, cache), *(d for _, d in kept)]
        if list(old) == new_items:
            continue
        seq = CommentedSeq(new_items)
        comments = getattr(old, "ca", None)
        n_code = len(new_items) - len(kept)
        if comments is not None:
            for j, (i, _) in enumerate(kept):  # a kept dep keeps its comment
                if i in comments.items:
                    seq.ca.items[n_code + j] = comments.items[i]
            last = len(old) - 1  # a comment block after the list hangs on its last item: keep it last
            if last in comments.items and is_code(dep_path(old[last]), root):
                seq.ca.items[len(new_items) - 1] = comments.items[last]
        stage.body["deps"] = seq
        changed.append(stage.label)
    if changed:
        buf = io.StringIO()
        yaml.dump(doc, buf)
        path.write_text(buf.getvalue(), encoding="utf-8")
    return changed


def import_graph(root: Path, under: str = "src/factrl") -> dict[str, list[str]]:
    """Module name -> the modules under ``under`` that it imports (sorted; no self-edges)."""
    resolver = Resolver(root)
    modules = {m.name: m for m in map(resolver.module_at, sorted((resolver.root / under).rglob("*.py")))}
    return {name: sorted({found.name for found in map(resolver.find, resolver.imports(m))
                          if found is not None and found.name in modules and found.name != name})
            for name, m in modules.items()}


def import_cycles(root: Path, under: str = "src/factrl") -> list[list[str]]:
    """The import circles among the modules under ``under``: each strongly connected component of
    their import graph with more than one module, as sorted module names (see the module docstring)."""
    graph = import_graph(root, under)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                components.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    return sorted(components)


LAYERS_DOC = "docs/design.md"  # where the layer order is written: its ```layers block


def read_layers(root: Path) -> list[tuple[str, list[str]]]:
    """The layer order of ``root/docs/design.md``: (layer name, its units), lowest layer first."""
    found = re.search(r"^```layers\n(.*?)^```", (root / LAYERS_DOC).read_text(encoding="utf-8"),
                      re.MULTILINE | re.DOTALL)
    if not found:
        raise ValueError(f"{LAYERS_DOC}: no ```layers block (the layer order of src/factrl)")
    layers = []
    for line in found.group(1).splitlines():
        line = line.partition("#")[0].strip()
        if line:
            name, colon, units = line.partition(":")
            if not colon or not units.split():
                raise ValueError(f"{LAYERS_DOC}: layer line {line!r} is not `name: unit unit ...`")
            layers.append((name.strip(), units.split()))
    placed = [u for _, units in layers for u in units]
    if len(placed) != len(set(placed)):
        raise ValueError(f"{LAYERS_DOC}: a unit is placed twice in the layer order")
    return layers


def _unit(module: str) -> str:
    """The top-level module or package of ``factrl`` that ``module`` belongs to (``factrl.rl.runs`` ->
    ``rl``); the package ``factrl`` itself is its own unit, ``factrl``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _path(resolver: Resolver, module: str) -> str:
    found = resolver.find(module)
    assert found is not None, module  # a module of the import graph is a file of the repository
    return found.path.as_posix()


def layer_breaks(root: Path, layers: list[tuple[str, list[str]]] | None = None) -> list[str]:
    """Every import of ``src/factrl`` against the layer order (see the module docstring), one line each."""
    layers = read_layers(root) if layers is None else layers
    level = {unit: i for i, (_, units) in enumerate(layers) for unit in units}
    level["factrl"] = -1  # the top package: importing factrl.x runs it first, whatever the layer
    names = {unit: f"{layers[i][0]} (layer {i})" for unit, i in level.items() if i >= 0}
    graph = import_graph(root)
    breaks = [f"{unit}: not in the layer order ({LAYERS_DOC}'s ```layers block)"
              for unit in sorted({_unit(m) for m in graph} - set(level))]
    resolver = Resolver(root)
    for module, imported in graph.items():
        here = _unit(module)
        for other in imported:
            there = _unit(other)
            if here == there or here not in level or there not in level or level[there] < level[here]:
                continue
            where = "a peer in the same layer" if level[there] == level[here] else "a higher layer"
            breaks.append(f"{_path(resolver, module)} ({names[here]}) imports {_path(resolver, other)} "
                          f"({names[there]}): {where}")
    return breaks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m factrl.devtools.deps",
                                 description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="list disagreements of dvc.yaml with the closures")
    mode.add_argument("--write", action="store_true", help="rewrite dvc.yaml's code deps to the closures")
    mode.add_argument("--show", metavar="STAGE", help="print one stage's closure (its name in dvc.yaml)")
    mode.add_argument("--cycles", action="store_true",
                      help="list the import circles among src/factrl's modules")
    mode.add_argument("--layers", action="store_true",
                      help=f"list import circles and imports against the layer order of {LAYERS_DOC}")
    ap.add_argument("--root", type=Path, default=Path("."), help="the repository (default: .)")
    ap.add_argument("--dvc-yaml", type=Path, default=None,
                    help="the file to check or write (default: ROOT/dvc.yaml)")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    if args.show:
        _, doc = load(args.dvc_yaml or root / "dvc.yaml")
        match = [s for s in stages(doc) if args.show.partition("@")[0] == s.name]
        if not match:
            ap.error(f"no stage {args.show!r} in dvc.yaml")
        print("\n".join(stage_closure(match[0], root)))
        return 0
    if args.cycles or args.layers:
        cycles = import_cycles(root)
        for component in cycles:
            print("import circle: " + " <-> ".join(component))
        if not cycles:
            print("src/factrl: no import circle")
        if not args.layers:
            return 1 if cycles else 0
        breaks = layer_breaks(root)
        for line in breaks:
            print("layer break: " + line)
        if not breaks:
            print(f"src/factrl: every import runs down the layer order of {LAYERS_DOC}")
        return 1 if cycles or breaks else 0
    if args.write:
        changed = write(root, args.dvc_yaml)
        print(f"rewrote the code deps of {len(changed)} stage(s): {', '.join(changed) or 'none'}")
        return 0
    problems = check(root, args.dvc_yaml)
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} disagreement(s); `python -m factrl.devtools.deps --write` regenerates "
              "the code deps", file=sys.stderr)
        return 1
    print("dvc.yaml: every stage's code deps equal its import closure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
