"""When, on what and at which load a benchmark ran: the record every bench/results/<name>.json carries.

    from bench._measured import Measurement

    measured = Measurement(precision)   # first thing in main(), before any timing
    ...
    measured.write(result, RESULTS)     # result + {"measured": {...}}, written atomically

``measured`` holds the commit the code was at (``git rev-parse HEAD``; ``dirty``: tracked files had
uncommitted changes, so the figures are not reproducible from that commit alone), the 1/5/15-minute
load averages when the benchmark started and when the result was written (on a 2-core machine 2.0
means both cores were busy with other work: absolute rates mean little then), the wall time, and
``factrl.hardware``'s record (resolved device and precision, torch's CPU capability ``AVX2`` /
``AVX512`` / ..., native bf16, torch threads), so a figure always says which kind of CPU it is from.
The file starts with ``_`` so `make bench` does not run it as a benchmark.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = "bench/results"  # relative to the repository root


def git_state(repo: Path = ROOT) -> dict[str, Any]:
    """``{"commit": HEAD's sha or None (not a git checkout), "dirty": tracked files changed}``
    (changed files under bench/results/ do not count)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()

    try:
        # results files are outputs, not code: `make bench` writes one after another, and the
        # second benchmark's figures are no less reproducible from the commit for the first's file
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){RESULTS_DIR}")
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(changed)}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


class Measurement:
    """Started when constructed (commit, load average, clock); :meth:`record` / :meth:`write` at the end.

    precision: the precision setting the benchmark runs at (``auto`` / ``bf16`` / ``fp32``), recorded
    as requested and as resolved on this machine.
    """

    def __init__(self, precision: str = "auto", device: str = "cpu", repo: Path = ROOT) -> None:
        self.precision, self.device = precision, device
        self.git = git_state(repo)  # the code that runs is the code at start
        self.started = datetime.now(UTC)
        self.load_avg_start = list(os.getloadavg())
        self._t0 = time.perf_counter()

    def record(self) -> dict[str, Any]:
        import torch

        from factrl.hardware import hardware_record

        return {
            **self.git,
            "started": self.started.isoformat(timespec="seconds"),
            "wall_seconds": round(time.perf_counter() - self._t0, 1),
            "load_avg_start": self.load_avg_start,
            "load_avg_end": list(os.getloadavg()),
            "cpus": os.cpu_count(),
            **hardware_record(self.precision, self.device),  # cpu_capability among them
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        }

    def write(self, result: dict, path: str | Path) -> dict:
        """``result`` with the ``measured`` record added, written atomically as JSON to ``path``; returned."""
        from factrl.io import write_json

        out = {**result, "measured": self.record()}
        write_json(out, path)
        return out
