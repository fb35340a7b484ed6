"""A stage whose output disk fills up (issue 41), shared by tests/stages/test_disk_full.py and
bench/reliability_kills.py (``disk`` key).

``prepare`` of the tiny profile writes its outputs (four claims files, the passages, a summary: about
35 KB) into ``data/``. That directory becomes a small disk: a tmpfs of ``SMALL`` bytes mounted there
(needs root), or, where mounting is refused, the stage runs under ``RLIMIT_FSIZE`` (every write past
the limit fails with EFBIG, as a full disk fails with ENOSPC; Python ignores SIGXFSZ). The stage must
stop with an error naming the output it could not write, leave no partial file (every Parquet file
left reads whole, no temporary file remains), and succeed once space is back (the tmpfs remounted
larger, or no limit), with the same outputs as a run that never ran out of space.
"""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

SMALL = 16 * 1024  # the first claims file (~9 KB) fits, the next does not
OUTPUT_DIR = "data"


def try_mount(path: Path, size: int) -> bool:
    """Mount a tmpfs of ``size`` bytes at ``path``; False where this sandbox refuses (not root)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


def remount(path: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True, capture_output=True)


def unmount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True)


def run_prepare(repo: Path, fsize_limit: int | None = None) -> subprocess.CompletedProcess:
    """``python -m stages.prepare`` in ``repo`` (its own code), optionally under RLIMIT_FSIZE."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))

    return subprocess.run([sys.executable, "-m", "stages.prepare"], cwd=repo, env=env, capture_output=True, text=True,
                          preexec_fn=limit if fsize_limit is not None else None)


def outputs_state(out_dir: Path) -> dict:
    """Files under ``out_dir``: Parquet files that do not read whole, and temporary files left."""
    files = sorted(p for p in out_dir.rglob("*") if p.is_file())
    broken = []
    for p in files:
        if p.suffix == ".parquet":
            try:
                pq.read_table(p)
            except Exception:  # any reader error: a partial file
                broken.append(str(p.relative_to(out_dir)))
    return {"files": [str(p.relative_to(out_dir)) for p in files], "partial_parquet": broken,
            "temp_files": [str(p.relative_to(out_dir)) for p in files if p.name.endswith(".tmp")]}


def hashes(out_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(out_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out_dir.rglob("*")) if p.is_file()}


def disk_full_trial(repo: Path, reference: Path) -> dict:
    """Run prepare in ``repo`` on a full disk, then with space back; ``reference`` is a repo where
    prepare ran with space (its ``data/`` is what the rerun must write). The record."""
    out_dir = repo / OUTPUT_DIR
    mounted = try_mount(out_dir, SMALL)
    try:
        full = run_prepare(repo, fsize_limit=None if mounted else SMALL // 2)
        last_line = (full.stderr.strip().splitlines() or [""])[-1]
        state = outputs_state(out_dir)
        if mounted:
            remount(out_dir, 64 * 1024 * 1024)
        rerun = run_prepare(repo)
        same = hashes(out_dir) == hashes(reference / OUTPUT_DIR)
    finally:
        if mounted:
            unmount(out_dir)
    return {"stage": "prepare", "output_dir": OUTPUT_DIR,
            "limit": f"tmpfs of {SMALL} bytes" if mounted else f"RLIMIT_FSIZE {SMALL // 2} bytes (no mount allowed)",
            "full_returncode": full.returncode, "error": last_line[:400],
            "files_left": state["files"], "partial_files": state["partial_parquet"], "temp_files_left": state["temp_files"],
            "rerun_returncode": rerun.returncode, "rerun_stderr_tail": rerun.stderr[-400:] if rerun.returncode else "",
            "rerun_equals_uninterrupted": same}
