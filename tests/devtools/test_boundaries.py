"""What may import what outside src/factrl: the benchmarks are a package that imports factrl (and
factrl.testing), never the tests; no test under tests/ imports a benchmark; and no code edits
``sys.path`` to reach another tree (bench, src, stages and flows are found as packages)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SYS_PATH_EDIT = re.compile(r"sys\.path\.(insert|append)|sys\.path *=")


def imported_tops(path: Path) -> set[str]:
    """The top-level names ``path`` imports, and those it runs as ``-m name`` in a subprocess."""
    text = path.read_text(encoding="utf-8")
    tops = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            tops |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            tops.add(node.module.split(".")[0])
    tops |= {m.split(".")[0] for m in re.findall(r'"-m",\s*"([\w.]+)"', text)}
    return tops


def test_no_code_edits_sys_path(repo_root):
    hits = [f"{p.relative_to(repo_root)}:{i}" for tree in ("bench", "src", "stages", "flows", "tests")
            for p in sorted((repo_root / tree).rglob("*.py"))
            if p.name != Path(__file__).name  # this file spells the pattern out
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if SYS_PATH_EDIT.search(line)]
    assert hits == []


def test_no_bench_imports_the_tests_and_no_test_imports_a_bench(repo_root):
    benches = sorted((repo_root / "bench").rglob("*.py"))
    assert len(benches) > 10
    assert [p.name for p in benches if "tests" in imported_tops(p)] == []
    assert [p.name for p in sorted((repo_root / "tests").rglob("*.py")) if "bench" in imported_tops(p)] == []


def test_the_import_check_sees_691c2d1s_forms(tmp_path):
    """bench/reliability.py imported tests.fault_llm in a function and ran ``-m tests.service.fakes``."""
    old = tmp_path / "reliability.py"
    old.write_text('def f():\n    from tests.fault_llm import FAULTS\n'
                   'cmd = [sys.executable, "-m", "tests.service.fakes", "--port", "1"]\n')
    assert imported_tops(old) == {"tests"}
    assert SYS_PATH_EDIT.search('sys.path.insert(0, str(ROOT / "src"))')
