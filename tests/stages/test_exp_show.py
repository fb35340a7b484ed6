"""`dvc exp show` lists a pipeline run: its params, evaluate's final accuracy per system and hop, and
each training run's last curve values (the DVCLive summaries dvc.yaml declares as metrics); `dvc
plots show` draws the DVCLive curve files.

The repository is a throw-away copy of this one (src/factrl/testing/pipeline_repo.py) with the files the stages
write put in place by the code that writes them (the eval metrics' layout, a DVCLive directory), so
the test checks dvc.yaml's declarations as DVC reads them, without running the pipeline."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from factrl.eval.report import nested_metrics
from factrl.rl.step_log import write_history
from factrl.testing.pipeline_repo import git, make_pipeline_repo

REPO = Path(__file__).resolve().parents[2]
DVC = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))


def _leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def exp_show(repo: Path) -> dict[str, dict[str, object]]:
    """The workspace row of ``dvc exp show --json``: ``{file: {dotted key: value}}`` for params and
    metrics files alike."""
    done = subprocess.run([DVC, "exp", "show", "--json"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    workspace = next(r for r in json.loads(done.stdout) if r["rev"] == "workspace")["data"]
    files = {**workspace.get("params", {}), **workspace.get("metrics", {})}
    return {name: _leaves(entry.get("data", {})) for name, entry in files.items()}


@pytest.fixture(scope="module")
def run_repo(tmp_path_factory) -> Path:
    repo = make_pipeline_repo(REPO, tmp_path_factory.mktemp("exp") / "repo", {})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pipeline")
    # what evaluate writes (runner.write_outputs: nested_metrics of its rows) and a trained round's curves
    rows = [{"dataset": "demo", "num_hops": hops, "system": system, "metric": "accuracy", "value": acc, "n": 30,
             "ci_low": acc - 0.1, "ci_high": acc + 0.1}
            for hops, system, acc in ((2, "HARIS (trained)", 0.8), (3, "HARIS (trained)", 0.7), (2, "RAG", 0.6))]
    (repo / "metrics").mkdir(exist_ok=True)
    (repo / "metrics" / "eval.json").write_text(json.dumps(nested_metrics(rows)))
    write_history([{"step": 1, "reward_mean": 0.25}, {"step": 2, "reward_mean": 0.5}],
                  repo / "metrics" / "train" / "reason_r1")
    write_history([{"step": 1, "loss": 2.0, "lr": 1e-4}, {"step": 2, "loss": 1.5, "lr": 1e-4}],
                  repo / "warmup" / "loss_search")
    return repo


def test_exp_show_lists_params_final_accuracy_and_training_summaries(run_repo):
    shown = exp_show(run_repo)
    params = shown["params.yaml"]
    assert isinstance(params["train.reasoning.lr"], float) and "train.search.steps" in params
    accuracy = shown["metrics/eval.json"]  # absent if evaluate's metrics stop being declared
    assert accuracy["demo.2hop.HARIS (trained).accuracy"] == 0.8  # a number: a column dvc exp show can sort on
    assert accuracy["demo.3hop.HARIS (trained).accuracy"] == 0.7 and accuracy["demo.2hop.RAG.accuracy"] == 0.6
    assert shown["metrics/train/reason_r1/metrics.json"] == {"reward_mean": 0.5, "step": 2}  # the DVCLive summary


def test_plots_show_draws_the_dvclive_curves(run_repo):
    done = subprocess.run([DVC, "plots", "show", "--json"], cwd=run_repo, capture_output=True, text=True, timeout=300)
    data = json.loads(done.stdout)["data"]  # errors: the stages that did not run here, no curves yet

    def points(name: str, column: str) -> list[tuple[int, float]]:
        values = data[name][0]["content"]["data"]["values"]
        return [(int(v["step"]), float(v[column])) for v in values]

    assert points("metrics/train/reason_r1/plots/metrics/reward_mean.tsv", "reward_mean") == [(1, 0.25), (2, 0.5)]
    assert points("warmup/loss_search/plots/metrics/loss.tsv", "loss") == [(1, 2.0), (2, 1.5)]
