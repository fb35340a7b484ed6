"""bench/learning.py's report: the keys the learning issue names, pooled intervals, the goals."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from bench import learning
from factrl.testing.pipeline_repo import git


def _record(name: str, right: dict, gate: float = 0.3) -> dict:
    """A run record with per-claim correctness: ``right[dataset][system key] = [0/1 per claim]``,
    claims c0.. of 2, 3, 4 hops in turn."""
    return {"name": name, "minutes": 30.0, "gate": {"claims": 32, "pass_at_1": 0.6, "pass_at_8": 0.9,
                                                    "uniform_group_rate": gate},
            "uniform_group_rate_per_step": [gate], "reward_per_step": [0.5],
            "cells": {"demo": {hop: {learning.SYSTEMS["haris_trained"]: {"avg_questions": 2.0}}
                               for hop in learning.HOPS}},
            "right": {ds: {learning.SYSTEMS[k]: {f"c{i:03d}": [float(c), 2 + i % 3] for i, c in enumerate(v)}
                           for k, v in by.items()} for ds, by in right.items()}}


def _claims(n_right: int, n: int = 60) -> list[int]:
    return [1] * n_right + [0] * (n - n_right)


def _seed(name: str, warm: int, trained: int) -> dict:
    demo = {"haris_base": _claims(27), "haris_warm": _claims(warm), "haris_trained": _claims(trained),
            "rag": _claims(30)}
    return _record(name, {"demo": demo, "heldout_wording": {"haris_warm": _claims(warm - 5),
                                                            "haris_trained": _claims(trained - 5)},
                          "unseen": {"haris_warm": _claims(warm), "haris_trained": _claims(trained - 2)}})


def test_report_has_the_issues_keys_pairs_the_gain_and_pools_seeds():
    runs = [_seed("seed0", 36, 45), _seed("seed1", 38, 46), _seed("seed2", 35, 44)]
    ablations = {"flip_advantage": _record("flip_advantage", {"demo": {"haris_trained": _claims(30)}}),
                 "no_rl": _record("no_rl", {"demo": {"haris_trained": _claims(36)}})}
    out = learning.report(runs, ablations)
    assert set(out["accuracy"]) == {"haris_base", "haris_warm", "haris_trained", "rag"}
    assert set(out["accuracy"]["haris_trained"]) == {"2hop", "3hop", "4hop", "pooled"}
    cell = out["accuracy"]["haris_trained"]["pooled"]
    assert {"mean", "spread", "ci95"} <= set(cell)
    assert cell["mean"] == pytest.approx(45 / 60) and cell["spread"] == pytest.approx(2 / 60)
    # RAG is one evaluation reused: its interval is that of 60 claims, its spread 0
    assert out["accuracy"]["rag"]["pooled"]["per_seed"] == [0.5]
    gain = out["gain"]
    assert gain["mean"] == pytest.approx((9 + 8 + 9) / 180)
    assert gain["per_seed"] == pytest.approx([9 / 60, 8 / 60, 9 / 60])
    assert 0 < gain["ci95"][0] < gain["mean"] < gain["ci95"][1]
    assert out["gate"] == {"pass_at_1": 0.6, "pass_at_8": 0.9, "uniform_group_rate": pytest.approx(0.3),
                           "samples_per_claim": [None, None, None]}
    assert out["heldout_wording"]["haris_trained"]["pooled"]["mean"] == pytest.approx(40 / 60)
    assert out["unseen_world_gain"] == pytest.approx((7 + 6 + 7) / 180)
    # an ablation's gain is its trained pair against the first seed's warm pair
    assert out["ablations"]["flip_advantage"]["gain"] == pytest.approx(-6 / 60)
    assert out["ablations"]["no_rl"]["gain"] == 0
    assert out["minutes_per_seed"] == [30.0] * 3
    goals = out["goals"]
    assert goals["gain>=0.05_ci_above_0_every_seed"] and goals["flip_advantage_gain<=0.02"]
    assert goals["aim_gain>=0.10"] is True and goals["trained>=rag+0.15"] is True


def test_goals_fail_without_a_gain():
    out = learning.report([_seed("seed0", 40, 40), _seed("seed1", 40, 41)], {})
    assert out["gain"]["mean"] == pytest.approx(1 / 120)
    assert not out["goals"]["gain>=0.05_ci_above_0_every_seed"]
    assert not out["goals"]["unseen_world_gain>0"]


@pytest.mark.parametrize("name", learning.ABLATIONS)
def test_each_ablation_changes_the_round_only(name):
    over = learning.ablation_overrides(name)
    assert list(over) == ["train"]


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
        return {"metrics": {}, "right": {}}

    monkeypatch.setattr(learning, "clone", lambda work, name, params, start_from=None: tmp_path)
    monkeypatch.setattr(learning, "run", lambda cmd, cwd, log: None)
    monkeypatch.setattr(learning, "evaluate", fake_evaluate)
    (tmp_path / "data" / "claims").mkdir(parents=True)
    (tmp_path / "data" / "claims" / "heldout_wording.parquet").write_text("")
    params, unseen = {"rounds": {"1": {}}}, (tmp_path / "c", tmp_path / "p")
    learning.one_run(tmp_path, "seed0", params, unseen, tmp_path / "log", first=True)
    assert {c["reason"] for c in asked[0][1]["checkpoints"]} == {"base", "warm", "last"}
    assert set(asked[0][1]["systems"]) == {"haris", "rag"}
    assert [name for name, _ in asked] == ["eval", "heldout", "unseen"]
    asked.clear()
    learning.one_run(tmp_path, "seed1", params, unseen, tmp_path / "log", first=False)
    assert asked[0][1]["systems"] == ["haris"]
    assert [c["reason"] for c in asked[0][1]["checkpoints"]] == ["warm", "last"]
    asked.clear()
    learning.one_run(tmp_path, "flip_advantage", params, unseen, tmp_path / "log", first=False, ablation=True)
    assert [name for name, _ in asked] == ["eval"]
    assert [c["reason"] for c in asked[0][1]["checkpoints"]] == ["last"]


def test_gate_runs_replace_the_seed_records_gates_and_name_their_commit():
    runs = [_seed("seed0", 36, 45), _seed("seed1", 38, 46)]  # gates of pass@8 0.9 (the frozen records')
    gates = [{"name": f"gate_seed{s}", "commit": "abc", "minutes": 20.0,
              "gate": {"claims": 32, "samples": 8, "pass_at_1": p1, "pass_at_8": p8, "uniform_group_rate": u}}
             for s, (p1, p8, u) in enumerate([(0.4, 1.0, 0.1), (0.5, 0.8, 0.3)])]
    out = learning.report(runs, {}, gates)
    assert out["gate"] == {"pass_at_1": pytest.approx(0.45), "pass_at_8": pytest.approx(0.9),
                           "uniform_group_rate": pytest.approx(0.2), "samples_per_claim": [8, 8]}
    assert out["gate_commits"] == ["abc"] and out["goals"]["uniform_group_rate<=0.5"] is True
    assert "gate_commits" not in learning.report(runs, {})


def test_a_gate_run_trains_no_reasoning_step_and_reads_the_rounds_gate(tmp_path, monkeypatch):
    written = {}

    def fake_clone(work, name, params, start_from=None):
        written.update(params)
        (tmp_path / "metrics" / "gate").mkdir(parents=True)
        (tmp_path / "metrics" / "gate" / "reason_r1.json").write_text('{"claims": 32, "pass_at_8": 1.0}')
        return tmp_path

    ran = []
    monkeypatch.setattr(learning, "clone", fake_clone)
    monkeypatch.setattr(learning, "run", lambda cmd, cwd, log: ran.append(cmd))
    params = {"rounds": {"1": {}}, "train": {"search": {"steps": 1}, "reasoning": {"steps": 4, "seed": 2}}}
    rec = learning.gate_run(tmp_path, "gate_seed2", params, tmp_path / "log")
    assert written["train"] == {"search": {"steps": 1}, "reasoning": {"steps": 0, "seed": 2}}
    assert params["train"]["reasoning"]["steps"] == 4  # the caller's params untouched
    assert ran == [["dvc", "repro", "train_reason@1"]] and rec["gate"] == {"claims": 32, "pass_at_8": 1.0}
