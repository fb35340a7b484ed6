"""bench/learning.py's report: the keys the learning issue names, pooled intervals, the goals."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from bench import learning
from factrl.testing.pipeline_repo import git


def _cells(acc: dict[str, float], n: int = 60, questions: float = 2.0) -> dict:
    return {hop: {label: {"accuracy": acc[key], "n": n, "avg_questions": questions}
                  for key, label in learning.SYSTEMS.items()} for hop in learning.HOPS}


def _run(trained: float, rag: float = 0.5, warm: float = 0.6, uniform: float = 0.5) -> dict:
    acc = {"haris_base": 0.45, "haris_warm": warm, "haris_trained": trained, "rag": rag, "single_agent": 0.5}
    return {"eval": _cells(acc), "unseen": {hop: {learning.SYSTEMS["haris_trained"]: {"accuracy": trained - 0.02,
                                                                                     "n": 60}}
                                          for hop in learning.HOPS},
            "reason_metrics": [[{"step": 1.0, "uniform_group_rate": uniform}]]}


def test_report_has_the_issues_keys_and_pools_seeds():
    runs = [_run(0.9), _run(0.88), _run(0.92)]
    out = learning.report(runs, {"no_dynamic_sampling": _run(0.7, uniform=0.9)}, dynamic_on=True)
    assert set(out["accuracy"]) == {"haris_base", "haris_warm", "haris_trained", "rag", "single_agent"}
    cell = out["accuracy"]["haris_trained"]["2hop"]
    assert {"mean", "spread", "ci95"} <= set(cell)
    assert cell["mean"] == pytest.approx(0.9) and cell["spread"] == pytest.approx(0.04)
    # 180 pooled claims: the interval is narrower than one seed's 60 would give, and holds the mean
    low, high = cell["ci95"]
    assert low < 0.9 < high and high - low < 0.11
    # RAG's three cells are one evaluation reused: its interval is that of 60 claims, not 180
    rag_low, rag_high = out["accuracy"]["rag"]["2hop"]["ci95"]
    assert rag_high - rag_low > 0.2 and out["accuracy"]["rag"]["2hop"]["spread"] == 0
    assert out["questions_per_claim"] == {hop: 2.0 for hop in learning.HOPS}
    assert out["uniform_group_rate"] == {"dynamic_sampling": pytest.approx(0.5), "plain": pytest.approx(0.9)}
    assert out["ablations"]["no_dynamic_sampling"]["3hop"] == pytest.approx(0.7)
    assert out["unseen_world"]["4hop"] == pytest.approx(0.88)
    goals = out["goals"]
    assert goals["trained_2hop>=0.85"] and goals["above_rag_3hop_by_0.15_disjoint_ci"]
    assert goals["unseen_within_5pt_2hop"] and goals["rounds_beyond_spread_2hop"]
    assert not goals["asks_hops_minus_1_4hop"]  # 2 questions per claim cannot verify a 4-hop chain


def test_goals_fail_at_chance():
    out = learning.report([_run(0.5), _run(0.52)], {}, dynamic_on=False)
    assert not any(v for k, v in out["goals"].items() if k.startswith(("trained_", "above_rag", "rounds_")))
    assert out["uniform_group_rate"] == {"plain": pytest.approx(0.5)}


@pytest.mark.parametrize("name", ["no_warm_start", "llm_teacher", "no_dynamic_sampling", "dynamic_sampling"])
def test_each_ablation_changes_one_section(name):
    over = learning.ablation_overrides(name)
    assert len(over) == 1


def test_an_unknown_ablation_is_an_error():
    with pytest.raises(SystemExit, match="unknown ablation 'no_rounds'"):
        learning.ablation_overrides("no_rounds")


def test_clone_links_shared_data_beside_the_clones_and_writes_its_params(tmp_path, monkeypatch, repo_root):
    root = tmp_path / "src" / "main"
    root.mkdir(parents=True)
    git(root, "init", "-q")
    git(root, "commit", "-q", "--allow-empty", "-m", "x")
    (tmp_path / "src" / "shared").mkdir()  # ../shared beside the checkout, as in CI
    monkeypatch.setattr(learning, "ROOT", root)
    params = yaml.safe_load((repo_root / "params.yaml").read_text())
    repo = learning.clone(tmp_path / "work", "seed0", params)
    expected = learning.write_params(params, tmp_path / "expected.yaml").read_text()
    assert (repo / ".git").exists() and (repo / "params.yaml").read_text() == expected
    # the clones' ../shared (real claim sets) resolves to the checkout's
    assert (tmp_path / "work" / "shared").resolve() == (tmp_path / "src" / "shared").resolve()
    # resuming the same clone is allowed; a clone of another commit is refused
    learning.clone(tmp_path / "work", "seed0", params)
    git(root, "commit", "-q", "--allow-empty", "-m", "y")
    with pytest.raises(SystemExit, match="use another --work directory"):
        learning.clone(tmp_path / "work", "seed0", params)


def test_a_later_run_starts_from_a_finished_runs_workspace_and_shares_its_cache(tmp_path, monkeypatch):
    finished = tmp_path / "work" / "seed0"
    finished.mkdir(parents=True)
    git(finished, "init", "-q")
    git(finished, "commit", "-q", "--allow-empty", "-m", "x")
    subprocess.run(["dvc", "init", "-q"], cwd=finished, check=True)
    for path in (".dvc/cache/files/md5/ab/cd", "models/reason_0/model.safetensors", "index/bm25.npz",
                 "dvc.lock", "metrics/train/reason_r1.csv", "metrics/learning_eval.json",
                 "metrics/eval.json", "params_eval.yaml", "checkpoints/warmup/fingerprint.json"):
        (finished / path).parent.mkdir(parents=True, exist_ok=True)
        (finished / path).write_text(path)
    monkeypatch.setattr(learning, "ROOT", finished)  # HEAD is the finished run's commit
    repo = learning.clone(tmp_path / "work", "seed1", {"warmup": {"seed": 1}}, start_from=finished)
    # the pipeline's outputs and lock come along, so dvc repro reruns only what the params change
    for path in ("models/reason_0/model.safetensors", "index/bm25.npz", "dvc.lock",
                 "metrics/train/reason_r1.csv", "checkpoints/warmup/fingerprint.json"):
        assert (repo / path).read_text() == path
    # the finished run's evaluation does not (evaluate() would skip it), nor its cache: it is shared
    for path in ("metrics/learning_eval.json", "metrics/eval.json", "params_eval.yaml", ".dvc/cache"):
        assert not (repo / path).exists(), path
    cache = subprocess.run(["dvc", "cache", "dir"], cwd=repo, capture_output=True, text=True, check=True)
    assert Path(cache.stdout.strip()) == (finished / ".dvc" / "cache").resolve()
    assert yaml.safe_load((repo / "params.yaml").read_text()) == {"warmup": {"seed": 1}}
    assert not (tmp_path / "work" / "seed1.partial").exists()


def test_seed_independent_systems_are_evaluated_once_and_ablations_only_train(tmp_path, monkeypatch):
    asked: list[tuple[str, dict]] = []

    def fake_evaluate(repo, params, name, section, log):
        asked.append((name, section))
        labels = [c["name"] for c in section["checkpoints"]]
        labels += [learning.SYSTEMS[s] for s in section["systems"] if s != "haris"]
        cells = {hop: {label: {"accuracy": 0.5, "n": 60, "avg_questions": 1.0} for label in labels}
                 for hop in learning.HOPS}
        return {"unseen" if name == "unseen" else "demo": cells}

    monkeypatch.setattr(learning, "clone", lambda work, name, params, start_from=None: tmp_path)
    monkeypatch.setattr(learning, "run", lambda cmd, cwd, log: None)
    monkeypatch.setattr(learning, "evaluate", fake_evaluate)
    params, unseen = {"rounds": {"1": {}}}, (tmp_path / "c", tmp_path / "p")
    first = learning.one_run(tmp_path, "seed0", params, unseen, tmp_path / "log")
    assert {c["reason"] for c in asked[0][1]["checkpoints"]} == {"base", "warm", "last"}
    assert set(asked[0][1]["systems"]) == {"haris", "rag", "single_agent"}
    first["eval"]["2hop"][learning.SYSTEMS["rag"]]["accuracy"] = 0.61  # marks the cell as seed 0's
    asked.clear()
    second = learning.one_run(tmp_path, "seed1", params, unseen, tmp_path / "log", shared=first["eval"])
    assert asked[0][1] == {"systems": ["haris"], "checkpoints": [
        {"name": learning.SYSTEMS["haris_warm"], "reason": "warm", "search": "warm"},
        {"name": learning.SYSTEMS["haris_trained"], "reason": "last", "search": "last"}]}
    assert set(second["eval"]["2hop"]) == set(learning.SYSTEMS.values())  # every system, reused or run
    assert second["eval"]["2hop"][learning.SYSTEMS["rag"]]["accuracy"] == 0.61
    assert [name for name, _ in asked] == ["eval", "unseen"]
    asked.clear()
    ablation = learning.one_run(tmp_path, "no_warm_start", params, unseen, tmp_path / "log", ablation=True)
    assert [name for name, _ in asked] == ["eval"] and "unseen" not in ablation
    assert [c["reason"] for c in asked[0][1]["checkpoints"]] == ["last"]
