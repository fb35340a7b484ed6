"""docs/results.md's tables that files already hold, built from those files so they cannot drift.

    python -m factrl.devtools.results_doc --write    # regenerate the tables in docs/results.md
    python -m factrl.devtools.results_doc --check    # exit 1 when docs/results.md is stale

A generated table sits between ``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->`` in
docs/results.md; the prose around it is written by hand. The tables:

* ``bench-files``: one row per ``bench/results/<name>.json``, from its ``measured`` block (the commit
  and whether the tree was dirty, the day, the CPU's torch capability and the precision, the load
  average when it started): which benchmark figure is from where.
* ``demo-report``: the accuracy table of the committed ``reports/eval.md`` (its demo section), and the
  run record it came from: the file under ``docs/runs/`` whose bytes equal the report, whose name
  (``eval-<commit>.md``) says the commit. A report with no identical run record says so.

``tests/devtools/test_results_doc.py`` fails when the page and the files disagree.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from factrl.tables import markdown_table

DOC = Path("docs/results.md")
BLOCK = re.compile(r"(<!-- generated:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.DOTALL)


def bench_files(root: Path) -> str:
    """The table of every bench/results/*.json's ``measured`` block."""
    body = []
    for path in sorted((root / "bench" / "results").glob("*.json")):
        m = json.loads(path.read_text(encoding="utf-8")).get("measured") or {}
        commit = (m.get("commit") or "not recorded")[:7] + (" (dirty)" if m.get("dirty") else "")
        load = m.get("load_avg_start")
        body.append([f"`bench/results/{path.name}`", commit, (m.get("started") or "not recorded")[:10],
                     f"{m.get('cpu_capability', '?')}, {m.get('precision', '?')}",
                     f"{load[0]:.1f}" if load else "not recorded"])
    return markdown_table(["file", "commit", "measured on", "CPU, precision", "load at start"], body)


def _section_table(report: str, heading: str) -> str:
    """The first markdown table after the line ``heading`` of ``report``."""
    lines = report.splitlines()
    start = lines.index(heading)
    table = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    return "\n".join(table)


def demo_report(root: Path) -> str:
    """Where the committed reports/eval.md comes from, and its demo accuracy table."""
    report = (root / "reports" / "eval.md").read_bytes()
    same = sorted(p for p in (root / "docs" / "runs").glob("*/eval*.md") if p.read_bytes() == report)
    if same:
        record = same[0].relative_to(root).as_posix()
        found = re.fullmatch(r"eval-([0-9a-f]{7,40})\.md", same[0].name)
        origin = (f"`reports/eval.md` is the report of the run recorded in `{record}` (byte for byte), "
                  f"at commit {found.group(1) if found else 'not recorded'}.")
    else:
        origin = "`reports/eval.md` matches no run record under `docs/runs/`: its run is not recorded."
    table = _section_table(report.decode("utf-8"), "## demo: accuracy per hop (percent, 95% CI)")
    return f"{origin}\n\n{table}"


TABLES: dict[str, Callable[[Path], str]] = {"bench-files": bench_files, "demo-report": demo_report}


def render(text: str, root: Path) -> str:
    """``text`` with every generated block rebuilt from the files under ``root``."""
    def block(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in TABLES:
            raise ValueError(f"{DOC}: unknown generated block {name!r}; known: {sorted(TABLES)}")
        return f"{match.group(1)}{TABLES[name](root)}\n{match.group(4)}"

    return BLOCK.sub(block, text)


def problems(root: Path) -> list[str]:
    """What makes ``root/docs/results.md`` stale: a missing block, or a block unlike its files."""
    text = (root / DOC).read_text(encoding="utf-8")
    found = {m.group("name") for m in BLOCK.finditer(text)}
    out = [f"{DOC}: no generated block {name!r}" for name in sorted(set(TABLES) - found)]
    if render(text, root) != text:
        out.append(f"{DOC}: a generated table differs from its files")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m factrl.devtools.results_doc", description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the tables of docs/results.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/results.md is stale")
    ap.add_argument("--root", type=Path, default=Path("."), help="the repository (default: .)")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    if args.write:
        path = root / DOC
        path.write_text(render(path.read_text(encoding="utf-8"), root), encoding="utf-8")
        print(f"wrote {DOC}")
        return 0
    found = problems(root)
    for line in found:
        print(line)
    if found:
        print("`python -m factrl.devtools.results_doc --write` regenerates them", file=sys.stderr)
        return 1
    print(f"{DOC}: every generated table equals its files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
