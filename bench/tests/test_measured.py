"""bench/_measured.py: every benchmark result says at which commit, load and CPU it was measured."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench._measured import Measurement, git_state
from factrl.hardware import resolve_precision
from factrl.testing.pipeline_repo import git

BENCH = Path(__file__).resolve().parents[1]  # bench/


def test_record_has_commit_dirty_flag_load_and_cpu(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    git(repo, "add", "code.py")
    git(repo, "commit", "-q", "-m", "one")
    (repo / "scratch.txt").write_text("untracked files do not make a tree dirty\n")

    out = Measurement("auto", repo=repo).write({"rate": 1.5}, tmp_path / "results" / "x.json")
    assert json.loads((tmp_path / "results" / "x.json").read_text()) == out and out["rate"] == 1.5
    rec = out["measured"]
    assert rec["commit"] == git(repo, "rev-parse", "HEAD") and rec["dirty"] is False
    assert len(rec["load_avg_start"]) == 3 and len(rec["load_avg_end"]) == 3 and rec["wall_seconds"] >= 0
    assert rec["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert rec["precision_requested"] == "auto" and rec["precision"] == resolve_precision("auto", "cpu")
    assert {"cpu_bf16_native", "torch_threads", "cpus", "started", "torch"} <= set(rec)

    (repo / "bench" / "results").mkdir(parents=True)
    (repo / "bench" / "results" / "y.json").write_text("{}")
    git(repo, "add", "bench")
    git(repo, "commit", "-q", "-m", "a result")
    (repo / "bench" / "results" / "y.json").write_text('{"rate": 2}')  # a benchmark wrote its result
    assert git_state(repo)["dirty"] is False
    (repo / "code.py").write_text("x = 2\n")
    assert git_state(repo)["dirty"] is True
    assert git_state(tmp_path / "results") == {"commit": None, "dirty": None}  # not a git checkout


def test_every_benchmark_writes_through_the_helper():
    scripts = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))
    assert len(scripts) >= 8
    for script in scripts:
        text = script.read_text()
        assert "Measurement(" in text and "measured.write(" in text, script.name
        assert "getloadavg" not in text, f"{script.name}: the load average is the helper's job"
