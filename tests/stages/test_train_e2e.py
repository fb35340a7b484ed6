"""The tiny profile end to end through `dvc repro`: prepare, index, curriculum, warm start, two
rounds of synthesize -> train_search -> train_reason, evaluate; a second repro is a no-op.

Slow (real SmolLM2 in every stage, a Prefect fan-out in synthesis): minutes on 2 cores.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml
from dvc.repo import Repo

from factrl.rl.step_log import read_history
from factrl.testing.pipeline_repo import make_pipeline_repo


@pytest.mark.slow
def test_tiny_profile_runs_end_to_end(tmp_path, repo_root, monkeypatch):
    tiny = yaml.safe_load((repo_root / "profiles" / "tiny.yaml").read_text())
    repo = make_pipeline_repo(repo_root, tmp_path / "repo", tiny)
    monkeypatch.chdir(repo)
    with Repo(str(repo)) as dvc:
        ran = [s.addressing for s in dvc.reproduce()]
    for i in (1, 2):  # stages are named by round id
        assert {f"synthesize@{i}", f"train_search@{i}", f"train_reason@{i}"} <= set(ran)
    assert ran.index("train_search@1") < ran.index("train_reason@1") < ran.index("synthesize@2")
    assert ran[-1] == "evaluate"
    assert ran.index("warmup") < ran.index("synthesize@1")  # round 1 starts from the warmed agents
    warm = json.loads((repo / "warmup" / "summary.json").read_text())
    assert warm["enabled"] and warm["sft"]["reasoning"]["steps"] == tiny["warmup"]["reasoning"]["max_steps"]
    for agent in ("reason", "search"):
        assert json.loads((repo / "models" / f"{agent}_0" / "config.json").read_text())["factrl_prompt"] == "short"
        # the prompt style travels with the weights through GRPO's checkpoints
        assert json.loads((repo / "models" / f"{agent}_2" / "config.json").read_text())["factrl_prompt"] == "short"
    for agent in ("search", "reason"):
        for r in (1, 2):
            assert (repo / "models" / f"{agent}_{r}" / "model.safetensors").exists()
            rows = read_history(repo / "metrics" / "train" / f"{agent}_r{r}")  # the run's DVCLive curves
            steps = tiny["train"]["search" if agent == "search" else "reasoning"]["steps"]
            if agent == "search" and pq.read_metadata(repo / "qa" / f"qa_r{r}.parquet").num_rows == 0:
                steps = 0  # the untrained agent asked no question: L_r = L_prev, nothing to train on
            assert len(rows) == steps
    metrics = json.loads((repo / "metrics" / "eval.json").read_text())
    assert "demo" in metrics
    with Repo(str(repo)) as dvc:
        assert dvc.reproduce() == []
