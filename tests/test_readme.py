"""The commands that README.md and docs/*.md show work as written.

Every ```bash block of README.md and of the pages directly in docs/ (not the run records in
docs/runs/) is split into simple commands (continuation lines joined, comments, heredoc bodies and
leading ``VAR=value`` assignments dropped; ``&&``, ``;``, ``|`` and ``&`` separate commands), and
each command this project owns is checked:

* ``factrl CMD ...`` (also ``.venv/bin/factrl``, ``python -m factrl.cli``): CMD is a command of
  :data:`factrl.cli.COMMANDS`, and the arguments parse with that command's own argparse parser (its
  ``main`` runs up to ``parse_args``, which returns the parsed arguments to the test instead of
  running the command). A pipeline-stage command takes at most what its ``main`` takes.
* ``factrl profile ...`` and ``factrl train ... --dry-run`` run for real, in a sandbox per block
  (a copy of params.yaml and profiles/, where the block's ``cp`` and ``mkdir`` run too), so a
  block's profile reaches its dry-run: the dry-run only prints the plan (no Ray, no model, no file).
* ``python -m MODULE``: the module exists (the repository's own modules by their file; arguments
  parsed as above where the module's ``main`` uses argparse); ``python FILE.py``: the file exists.
* ``make TARGET``: the Makefile has the target.
* ``dvc repro STAGE ...``: dvc.yaml has the stage; ``dvc exp run -S KEY=VALUE``: DVC's own override
  code accepts it on a copy of params.yaml, and the edited sections still load.

Outside the blocks, inline ``make X`` and ``factrl X`` name real targets and commands, and relative
links (with their #anchors) point at files and headings that exist.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from factrl.cli import COMMANDS

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
OPERATORS = {"&&", "||", ";", "|", "&", "(", ")", "$"}
REDIRECTIONS = {"<", ">", ">>", ">&", "&>", "<&"}
FACTRL = {"factrl", ".venv/bin/factrl"}
PYTHON = re.compile(r"^(?:\.venv/bin/|\$\(BIN\)/)?python(?:3(?:\.\d+)?)?$")
OWN_PACKAGES = ("factrl", "stages", "flows", "bench")


@dataclass(frozen=True)
class Cmd:
    page: str
    line: int  # 1-based line of the command in its page
    block: int  # index of the bash block in its page
    argv: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}:{' '.join(self.argv)[:60]}"


def bash_blocks(path: Path) -> list[tuple[int, list[str]]]:
    """``(first line number, lines)`` of each ```bash block."""
    blocks, current, start = [], None, 0
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if current is None and line.strip() == "```bash":
            current, start = [], n + 1
        elif current is not None and line.strip() == "```":
            blocks.append((start, current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def simple_commands(tokens_: list[str]) -> list[list[str]]:
    """Split on shell operators; drop redirections and leading ``VAR=value`` assignments."""
    out, current = [], []
    toks = iter([*tokens_, ";"])
    for tok in toks:
        if tok in REDIRECTIONS:
            next(toks, None)  # the redirection's file
            continue
        if tok in OPERATORS or tok in {"<<", "<<-"}:
            if tok.startswith("<<"):
                current = []  # the heredoc's command (python -) reads the body: not checked
            while current and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", current[0]):
                current.pop(0)
            if current:
                out.append(current)
            current = []
        else:
            current.append(tok)
    return out


def page_commands(path: Path) -> list[Cmd]:
    cmds = []
    for b, (start, lines) in enumerate(bash_blocks(path)):
        i = 0
        while i < len(lines):
            first = i
            line = lines[i]
            while line.endswith("\\") and i + 1 < len(lines):  # continuation lines
                i += 1
                line = line[:-1] + " " + lines[i].strip()
            i += 1
            heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
            if heredoc:  # skip the body up to the delimiter
                while i < len(lines) and lines[i].strip() != heredoc.group(1):
                    i += 1
                i += 1
            for argv in simple_commands(tokens(line)):
                cmds.append(Cmd(path.relative_to(REPO).as_posix(), start + first, b, tuple(argv)))
    return cmds


ALL = [c for page in PAGES for c in page_commands(page)]


def is_factrl(argv) -> bool:
    return argv[0] in FACTRL or (PYTHON.match(argv[0]) is not None and argv[1:3] == ("-m", "factrl.cli"))


def factrl_args(argv) -> list[str]:
    return list(argv[1:] if argv[0] in FACTRL else argv[3:])


# --------------------------------------------------------------------------------------------
# parsing a command's arguments with its own parser
# --------------------------------------------------------------------------------------------


class Parsed(Exception):
    """Raised by the patched argparse once a command's arguments parsed."""


def parse_with_main(module_name: str, args: list[str], monkeypatch) -> None:
    """Run ``module.main(args)`` until its argparse parser has parsed ``args``; fail on a parse error
    and when ``main`` returned without parsing (it would have run the command)."""
    real_parse_args = argparse.ArgumentParser.parse_args
    real_known = argparse.ArgumentParser.parse_known_args
    inside = []

    def parse_args(self, a=None, namespace=None):
        inside.append(True)
        try:
            ns = real_parse_args(self, a, namespace)
        finally:
            inside.pop()
        raise Parsed(ns)

    def parse_known_args(self, a=None, namespace=None):
        result = real_known(self, a, namespace)
        if inside:
            return result
        raise Parsed(result)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse_known_args)
    module = importlib.import_module(module_name)
    try:
        module.main(list(args))
    except Parsed:
        return
    except SystemExit as exc:
        pytest.fail(f"{module_name}: the arguments {args} do not parse (exit {exc.code})")
    pytest.fail(f"{module_name}.main returned without parsing its arguments: cannot check {args}")


def own_module_file(name: str) -> Path | None:
    """The file of one of the repository's modules (factrl from src/, stages and flows from the root)."""
    parts = name.split(".")
    base = REPO / "src" if parts[0] == "factrl" else REPO
    path = base.joinpath(*parts)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def main_arity(path: Path) -> int:
    """How many positional arguments ``main`` of a module file accepts."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    [main] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    return len(main.args.posonlyargs) + len(main.args.args)


def check_factrl(args: list[str], monkeypatch) -> None:
    if not args or args[0] in {"-h", "--help"}:
        return
    name, rest = args[0], args[1:]
    assert name in COMMANDS, f"factrl {name}: no such command (known: {sorted(COMMANDS)})"
    command = COMMANDS[name]
    if command.stage:  # `main(*argv[1:2])` runs the stage itself: check what it would receive
        path = own_module_file(command.module)
        assert path is not None, f"factrl {name}: module {command.module} not found"
        assert len(rest) <= min(1, main_arity(path)) and not any(a.startswith("-") for a in rest), (
            f"factrl {name} takes at most {min(1, main_arity(path))} argument(s) (a params file), got {rest}")
        return
    parse_with_main(command.module, rest, monkeypatch)
    if name == "train":
        from factrl.recipes.train_cli import parse_stage

        stage, _round = parse_stage(rest[rest.index("--stage") + 1])
        assert stage in dvc_stages()


def check_python(argv: tuple[str, ...], monkeypatch) -> None:
    if argv[1:2] != ("-m",):
        script = next((a for a in argv[1:] if not a.startswith("-")), None)
        if argv[1:2] in {("-",), ("-c",)} or script is None:
            return  # a heredoc or an inline program
        assert (REPO / script).exists(), f"python {script}: no such file"
        return
    module, args = argv[2], list(argv[3:])
    if module.split(".")[0] in OWN_PACKAGES:
        path = own_module_file(module)
        assert path is not None, f"python -m {module}: no such module in the repository"
        if args and "ArgumentParser(" in path.read_text(encoding="utf-8"):
            parse_with_main(module, args, monkeypatch)
        elif args:
            assert len(args) <= main_arity(path), f"python -m {module}: main takes fewer than {args}"
        return
    if importlib.util.find_spec(module.split(".")[0]) is None:
        pytest.skip(f"python -m {module}: {module.split('.')[0]} is not installed here")
    assert importlib.util.find_spec(module) is not None, f"python -m {module}: no such module"


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return {m for m in re.findall(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", text, re.M)}


def dvc_stages() -> set[str]:
    return set(yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"])


def check_dvc(argv: tuple[str, ...], tmp_path) -> None:
    args = list(argv[1:])
    if args[:1] == ["repro"]:
        for target in (a for a in args[1:] if not a.startswith("-")):
            assert target.split("@")[0] in dvc_stages(), f"dvc repro {target}: no such stage in dvc.yaml"
    elif args[:2] == ["exp", "run"]:
        overrides = [args[i + 1] for i, a in enumerate(args) if a in {"-S", "--set-param"}]
        if not overrides:
            return
        from dvc.utils.hydra import apply_overrides

        from factrl.sections import load_any

        params = tmp_path / "params.yaml"
        shutil.copy(REPO / "params.yaml", params)
        apply_overrides(params, overrides)  # what `dvc exp run -S` does to params.yaml
        for section in {o.lstrip("+~").split(".")[0].split("=")[0] for o in overrides}:
            load_any(section, params)


@pytest.mark.parametrize("cmd", ALL, ids=[c.id for c in ALL])
def test_command_exists_and_its_arguments_parse(cmd: Cmd, monkeypatch, tmp_path):
    argv = cmd.argv
    assert "..." not in argv, f"{cmd.id}: an elided argument ('...') in a command the docs show"
    monkeypatch.syspath_prepend(str(REPO))  # `stages` and `flows`, as `factrl` run from the repository
    if is_factrl(argv):
        check_factrl(factrl_args(argv), monkeypatch)
    elif PYTHON.match(argv[0]):
        check_python(argv, monkeypatch)
    elif argv[0] == "make":
        for target in (a for a in argv[1:] if not a.startswith("-") and "=" not in a):
            assert target in makefile_targets(), f"make {target}: no such target in the Makefile"
    elif argv[0] in {"dvc", ".venv/bin/dvc"}:
        check_dvc(argv, tmp_path)


# --------------------------------------------------------------------------------------------
# profiles and dry-runs, for real, block by block
# --------------------------------------------------------------------------------------------

BLOCKS = sorted({(c.page, c.block) for c in ALL
                 if is_factrl(c.argv) and factrl_args(c.argv)[:1] in (["profile"], ["train"])})


def sandbox_path(root: Path, relative: str) -> Path:
    assert not Path(relative).is_absolute() and ".." not in Path(relative).parts, (
        f"{relative}: the docs' commands should work on paths inside the repository")
    return root / relative


@pytest.mark.parametrize("page,block", BLOCKS, ids=[f"{p}#bash{b}" for p, b in BLOCKS])
def test_profiles_and_dry_runs_run(page, block, tmp_path):
    """The block's `factrl profile` and `factrl train --dry-run` commands, in order, in a sandbox
    holding params.yaml and profiles/ (and the block's own `cp` / `mkdir`): the verl dry-run the
    README shows prints verl's command and composed config."""
    from factrl.config import load_section
    from factrl.profiles import apply_profile
    from factrl.recipes.haris.params import TrainParams

    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    (tmp_path / ".cache").mkdir()  # what `make setup` leaves
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "src"), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    ran = 0
    for cmd in (c for c in ALL if (c.page, c.block) == (page, block)):
        argv = list(cmd.argv)
        if argv[0] == "cp":
            src, dst = argv[-2:]
            shutil.copy(sandbox_path(tmp_path, src), sandbox_path(tmp_path, dst))
        elif argv[0] == "mkdir":
            for d in (a for a in argv[1:] if not a.startswith("-")):
                sandbox_path(tmp_path, d).mkdir(parents=True, exist_ok=True)
        elif is_factrl(cmd.argv) and factrl_args(cmd.argv)[:1] == ["profile"]:
            args = factrl_args(cmd.argv)[1:]
            params = args[args.index("--params") + 1] if "--params" in args else "params.yaml"
            apply_profile(args[0], sandbox_path(tmp_path, params), tmp_path / "profiles")
            ran += 1
        elif is_factrl(cmd.argv) and factrl_args(cmd.argv)[:1] == ["train"] and "--dry-run" in argv:
            proc = subprocess.run([sys.executable, "-m", "factrl.cli", *factrl_args(cmd.argv)], cwd=tmp_path,
                                  env=env, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, f"{cmd.id}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
            args = factrl_args(cmd.argv)
            params = args[args.index("--params") + 1] if "--params" in args else "params.yaml"
            backend = (args[args.index("--backend") + 1] if "--backend" in args
                       else load_section(TrainParams, sandbox_path(tmp_path, params)).backend)
            if backend == "verl":  # the servers, the main_ppo command, then verl's composed config
                assert "-m verl.trainer.main_ppo" in proc.stdout, proc.stdout[:2000]
                assert "# verl's ppo_trainer config with these overrides:" in proc.stdout
            ran += 1
    assert ran


def test_the_readme_shows_a_verl_dry_run_that_runs():
    """Issue 39: the README's verl dry-run failed on the demo params; the one it shows now is run above."""
    readme = [c for c in ALL if c.page == "README.md" and is_factrl(c.argv)]
    dry = [c for c in readme if factrl_args(c.argv)[:1] == ["train"] and "--dry-run" in c.argv]
    assert any("verl" in c.argv for c in dry)
    assert ("README.md", dry[0].block) in BLOCKS


# --------------------------------------------------------------------------------------------
# inline commands and links
# --------------------------------------------------------------------------------------------


def inline_code(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return re.findall(r"`([^`\n]+)`", text)


def github_anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {github_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_inline_commands_and_links(page):
    for code in inline_code(page):
        words = code.split()
        if words[0] == "make" and len(words) > 1 and re.fullmatch(r"[a-z][\w-]*", words[1]):
            assert words[1] in makefile_targets(), f"{page.name}: `{code}`: no such make target"
        if words[0] in FACTRL and len(words) > 1 and re.fullmatch(r"[a-z][a-z-]*", words[1]):
            assert words[1] in COMMANDS, f"{page.name}: `{code}`: no such factrl command"
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{page.name}: link to {target}: no such file"
        if anchor:
            assert anchor in anchors(dest), f"{page.name}: link to {target}: no such heading in {dest.name}"


def test_readme_is_short_and_points_into_the_repository():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert "../shared/DESIGN.md" not in text and "docs/design.md" in text


def paragraphs(text: str) -> list[str]:
    """The prose paragraphs of a markdown page: code blocks, tables, headings and list items left out."""
    out, current, in_code = [], [], False
    for line in text.splitlines() + [""]:
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code or line.startswith(("|", "#", "- ", "  ")) or not line.strip():
            if current:
                out.append(" ".join(current))
            current = []
            continue
        current.append(line.strip())
    return out


def test_readme_has_short_paragraphs():
    """No paragraph over 400 characters (691c2d1's README had one of 794)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    long = [p[:60] for p in paragraphs(text) if len(p) > 400]
    assert long == []
    assert [len(p) for p in paragraphs("one\ntwo\n\n```\ncode\n```\n| a |\n" + "x " * 250)] == [7, 499]


def test_every_benchmark_a_page_names_is_a_module():
    named = {(page.name, m) for page in PAGES
             for m in re.findall(r"python -m bench\.(\w+)", page.read_text(encoding="utf-8"))}
    assert named and [n for n in sorted(named) if not (REPO / "bench" / f"{n[1]}.py").is_file()] == []
