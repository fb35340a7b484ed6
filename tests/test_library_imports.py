"""The installed library stands on its own: no module of ``src/factrl`` imports the repository's
scripts (``stages/``, ``flows/``), so ``pip install factrl`` outside a checkout can run every command
that is not about a checkout's own stages."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from factrl.devtools import deps

SCRIPT_PACKAGES = ("stages", "flows")  # the repository's entry points, not installed with factrl

# Modules that cannot import on this CPU machine for a reason other than the scripts: each named with
# why. They are skipped by the import test (the static test below still reads them).
NEEDS_GPU_STACK = {
    "factrl.llm.vllm": "imports vllm, which only GPU machines install",
}

IMPORT_ALL = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]  # no repository root, no cwd

    class NoScripts:
        '''Block the repository's entry-point packages, wherever they might be found.'''
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {blocked!r}:
                raise ImportError(f"blocked: {{name}} is a repository script, not part of factrl")
            return None

    sys.meta_path.insert(0, NoScripts())
    import factrl
    failed = {{}}
    names = [m.name for m in pkgutil.walk_packages(factrl.__path__, "factrl.")]
    for name in names:
        if name in {skip!r}:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # every failure is reported, the test decides
            failed[name] = f"{{type(exc).__name__}}: {{exc}}"
    print(json.dumps({{"modules": names, "failed": failed}}))
""")


def test_every_library_module_imports_without_the_repository_scripts(repo_root, tmp_path):
    """Each module of factrl imports in a process that has only ``src/`` on its path (cwd elsewhere,
    ``stages``/``flows`` blocked)."""
    script = IMPORT_ALL.format(blocked=SCRIPT_PACKAGES, skip=sorted(NEEDS_GPU_STACK))
    env = {"PYTHONPATH": str(repo_root / "src"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
           "PREFECT_HOME": str(tmp_path / "prefect")}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(result["modules"]) > 80  # the walk found the package
    assert set(NEEDS_GPU_STACK) <= set(result["modules"]), "a skipped module no longer exists: drop it"
    assert result["failed"] == {}


def test_no_library_module_names_a_repository_script(repo_root):
    """No import statement of ``src/factrl``, at any depth (a function-level import runs only when its
    command does, so importing alone cannot find it), names ``stages`` or ``flows``."""
    resolver = deps.Resolver(repo_root)
    offenders = []
    for path in sorted((repo_root / "src" / "factrl").rglob("*.py")):
        module = resolver.module_at(path)
        for name in sorted(resolver.imports(module)):
            if name.split(".")[0] in SCRIPT_PACKAGES:
                offenders.append(f"{module.path}: imports {name}")
    assert offenders == []


def test_the_command_never_edits_sys_path(repo_root):
    """``factrl`` finds a checkout's stage modules by path, not by putting ``.`` on ``sys.path``."""
    source = (repo_root / "src" / "factrl" / "cli.py").read_text(encoding="utf-8")
    assert "sys.path" not in source


def test_a_checkout_command_outside_a_checkout_says_so(tmp_path):
    """``factrl prepare`` runs the checkout's ``stages/prepare.py``: elsewhere it stops with an error
    naming the directory and what is missing."""
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "factrl.cli", "prepare"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert f"{tmp_path}" in proc.stderr and "stages/prepare.py" in proc.stderr, proc.stderr[-2000:]
    assert "factrl checkout" in proc.stderr
