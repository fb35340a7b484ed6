"""Throw-away git repositories for tests: a copy of this one (tracked files only) for DVC and Prefect
pipeline tests, and ``git`` with a test identity for tests that commit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml


def git(repo: Path, *args: str) -> str:
    """``git *args`` in ``repo`` with a throw-away identity (commits need one); its stdout, stripped."""
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def make_pipeline_repo(src: Path, dest: Path, params_edit: dict) -> Path:
    """Copy ``src``'s tracked files to ``dest``, apply ``params_edit`` (deep-merged), git-init it."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=src, check=True, capture_output=True, text=True).stdout.split()
    for name in files:
        if not (src / name).exists():
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / name, target)
    edit_params(dest, params_edit)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest


def edit_params(repo: Path, edit: dict) -> None:
    path = repo / "params.yaml"
    params = yaml.safe_load(path.read_text())
    _merge(params, edit)
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def _merge(base: dict, edit: dict) -> None:
    for key, value in edit.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
