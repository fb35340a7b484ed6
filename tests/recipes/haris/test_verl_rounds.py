"""A training stage on ``train.backend: verl`` end to end on CPU, with a stand-in for verl's
``main_ppo`` (tests/recipes/fake_main_ppo.py; verl's trainer itself needs CUDA): the stage exports
its rows, serves ``index/`` with a real ``factrl serve-retriever`` while training runs, and merges
verl's checkpoint into models/search_<r> with the curve in metrics/train, where DVC expects them."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
import torch

from factrl.rl import verl_backend
from factrl.rl.step_log import read_history
from factrl.servers import free_port
from factrl.testing.pipeline_repo import edit_params
from tests.stages.test_train import qa_table, tiny_world


@pytest.mark.slow
def test_train_search_stage_on_the_verl_backend(tmp_path, repo_root, monkeypatch):
    from transformers import AutoModelForCausalLM

    from factrl.recipes.haris.train import run_train
    from tests.rl.tiny import tiny_model, tokenizer

    claims, index = tiny_world(tmp_path / "world")
    shutil.copytree(index, tmp_path / "index")
    (tmp_path / "qa").mkdir()
    pq.write_table(qa_table(claims), tmp_path / "qa" / "qa_r1.parquet")
    tok = tokenizer()
    init = tiny_model(tok)
    init.save_pretrained(tmp_path / "models" / "search_0")
    tok.save_pretrained(tmp_path / "models" / "search_0")
    shutil.copy(repo_root / "params.yaml", tmp_path / "params.yaml")
    search = {"steps": 3, "retrieval_mode": "bm25", "dynamic_sampling": False}  # verl 0.9 has no filter_groups
    edit_params(tmp_path, {"train": {"verl": {"retriever_port": free_port()}, "search": search}})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(verl_backend, "MAIN_PPO", ("-m", "tests.recipes.fake_main_ppo"))
    monkeypatch.setenv("PYTHONPATH", f"{repo_root}:{repo_root / 'src'}")
    result = run_train("search", 1, "params.yaml", backend="verl")
    assert [r["reward_mean"] for r in result.rows] == [0.1, 0.2, 0.3]
    assert [r["reward_mean"] for r in read_history(tmp_path / "metrics" / "train" / "search_r1")] == [0.1, 0.2, 0.3]
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "models" / "search_1")
    first = next(iter(init.state_dict()))
    assert torch.equal(trained.state_dict()[first].float(), (init.state_dict()[first] + 1.0).bfloat16().float())
    info = json.loads((tmp_path / "models" / "search_1" / "factrl_train.json").read_text())
    assert info["backend"] == "verl" and info["prompts"] == claims.num_rows and info["final"]["step"] == 3
    work = tmp_path / "checkpoints" / "search_r1"
    assert (work / "train.parquet").exists() and (work / "verl" / "latest_checkpointed_iteration.txt").exists()
