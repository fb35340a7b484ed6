"""docs/results.md's generated tables equal the files they are built from (factrl.devtools.results_doc):
the committed page is current, 691c2d1's page (hand-written tables, a report attributed to a run it
did not come from) is stale, and so is the page after a benchmark file or the report changes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from factrl.devtools import results_doc


def test_results_md_is_current(repo_root, capsys):
    assert results_doc.problems(repo_root) == []
    assert results_doc.main(["--check", "--root", str(repo_root)]) == 0


def _copy(repo_root: Path, root: Path) -> Path:
    for part in ("bench/results", "docs/runs/demo-2026-11-27"):
        shutil.copytree(repo_root / part, root / part)
    for part in ("reports/eval.md", "docs/results.md"):
        (root / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(repo_root / part, root / part)
    return root


def test_691c2d1s_page_is_stale(repo_root, tmp_path):
    root = _copy(repo_root, tmp_path)
    old = subprocess.run(["git", "show", "691c2d1:docs/results.md"], cwd=repo_root, capture_output=True, text=True)
    if old.returncode != 0:  # a shallow clone without that commit: plant its lack of generated tables
        old_text = "# Results\n\n| System | 2-hop |\n|---|---|\n| HARIS (trained) | 98.33 |\n"
    else:
        old_text = old.stdout
    (root / "docs/results.md").write_text(old_text)
    assert results_doc.problems(root) == ["docs/results.md: no generated block 'bench-files'",
                                          "docs/results.md: no generated block 'demo-report'"]


def test_a_changed_benchmark_or_report_makes_the_page_stale_and_write_mends_it(repo_root, tmp_path):
    root = _copy(repo_root, tmp_path)
    bench = root / "bench/results/m2r.json"
    result = json.loads(bench.read_text())
    result["measured"]["commit"] = "0123456789abcdef"
    bench.write_text(json.dumps(result))
    assert results_doc.problems(root) == ["docs/results.md: a generated table differs from its files"]
    assert results_doc.main(["--write", "--root", str(root)]) == 0
    assert results_doc.problems(root) == [] and "| `bench/results/m2r.json` | 0123456 |" in (
        root / "docs/results.md").read_text()

    report = root / "reports/eval.md"
    text = report.read_text()
    edited = re.sub(r"\| HARIS \(trained\) \| [0-9.]+ ", "| HARIS (trained) | 12.34 ", text)  # one cell changed
    assert edited != text
    report.write_text(edited)
    assert results_doc.problems(root) == ["docs/results.md: a generated table differs from its files"]
    results_doc.main(["--write", "--root", str(root)])
    assert "matches no run record under `docs/runs/`" in (root / "docs/results.md").read_text()
