"""One agent's training run (factrl.rl.runs): prompts capped by a seeded draw, the state directory's
resume-or-restart rule and the run's fingerprint. The runs themselves are driven in tests/stages
(test_train: HARIS's agents, killed and resumed; test_train_m2r, test_train_march, test_warmup)."""

from __future__ import annotations

import dataclasses

from factrl.recipes.haris.params import SearchTrainParams
from factrl.rl import runs
from tests.stages.test_train import SHORT


def test_select_prompts_is_seeded_and_capped():
    items = [{"id": str(i)} for i in range(10)]
    a = runs.select_prompts(items, 4, seed=3)
    assert len(a) == 4 and a == runs.select_prompts(items, 4, seed=3)
    assert a != runs.select_prompts(items, 4, seed=4)
    assert sorted(x["id"] for x in runs.select_prompts(items, 0, seed=3)) == sorted(x["id"] for x in items)


def test_state_dir_resumes_same_run_and_restarts_changed_one(tmp_path):
    state = tmp_path / "state"
    assert runs.prepare_state_dir(state, "a") is False
    (state / "checkpoints" / "step-000001").mkdir(parents=True)
    assert runs.prepare_state_dir(state, "a") is True  # same inputs: resume
    assert runs.prepare_state_dir(state, "b") is False  # e.g. a new lr: start over
    assert not (state / "checkpoints").exists()
    cfg = SearchTrainParams(**SHORT)
    items = [{"id": "1", "question": "q", "answer": "a"}]
    assert runs.fingerprint(cfg, "x", items) == runs.fingerprint(cfg, "x", items)
    assert runs.fingerprint(cfg, "x", items) != runs.fingerprint(dataclasses.replace(cfg, lr=1e-6), "x", items)
    # how long a run is and where it computes are not what its steps compute: raising steps resumes
    for how_long in ({"steps": cfg.steps + 5}, {"checkpoint_every": 7}, {"keep_checkpoints": 9}, {"device": "cuda"}):
        assert runs.fingerprint(dataclasses.replace(cfg, **how_long), "x", items) == runs.fingerprint(cfg, "x", items)
