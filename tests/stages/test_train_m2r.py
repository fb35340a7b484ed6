"""Stage `train_m2r@<id>`: the M2R curriculum stages in the DVC graph (off by default, an `m2r` edit
reruns them alone), errors that name the params key, and one stage end to end on a tiny demo world
(warm start + GRPO with a tiny random Llama and SmolLM2's tokenizer) whose results file records the
format failures, the wall time and the peak memory."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from dvc.repo import Repo

from factrl.config import ConfigError, load_section
from factrl.recipes import m2r as recipe
from factrl.recipes.m2r_params import M2RParams, M2RStageParams, M2RStagesParams
from factrl.rl.params import SFTParams
from factrl.testing.pipeline_repo import edit_params, make_pipeline_repo
from tests.stages.test_train_dvc import _dry, commit_stand_ins

STAGES = {"1": {"prev": 0, "segment": "m2r_stage1", "format": 1, "start": "segments/all.parquet"},
          "2": {"prev": 1, "segment": "m2r_stage2", "format": 2, "start": "m2r/model_1"}}


def _stage_names(repo: Path) -> set[str]:
    with Repo(str(repo)) as dvc:
        return {s.addressing for s in dvc.index.stages}


def test_m2r_is_off_by_default(repo_root, tmp_path):
    repo = make_pipeline_repo(repo_root, tmp_path / "repo", {})
    assert load_section(M2RStagesParams, repo / "params.yaml").stages == ()
    assert not {n for n in _stage_names(repo) if n.startswith("train_m2r")}


@pytest.fixture
def m2r_repo(tmp_path, repo_root, monkeypatch):
    repo = make_pipeline_repo(repo_root, tmp_path / "repo", {"m2r_stages": STAGES})
    monkeypatch.chdir(repo)
    return commit_stand_ins(repo)


def test_an_m2r_edit_reruns_the_m2r_stages_alone_and_in_curriculum_order(m2r_repo):
    assert {"train_m2r@1", "train_m2r@2"} <= _stage_names(m2r_repo)
    edit_params(m2r_repo, {"m2r": {"lr": 2e-6}})
    assert _dry(m2r_repo) == ["train_m2r@1", "train_m2r@2"]


def test_other_sections_leave_the_m2r_stages_alone(m2r_repo):
    edit_params(m2r_repo, {"train": {"reasoning": {"lr": 2e-6}}})
    assert not [s for s in _dry(m2r_repo) if s.startswith("train_m2r")]


def test_stage_2_starts_from_stage_1(m2r_repo):
    import networkx as nx

    with Repo(str(m2r_repo)) as dvc:
        graph = dvc.index.graph
        by_name = {s.addressing: s for s in graph.nodes}
        upstream = {s.addressing for s in nx.descendants(graph, by_name["train_m2r@2"])}
    assert {"train_m2r@1", "curriculum", "index"} <= upstream


# --- errors that name the key ----------------------------------------------------------------------


def test_a_wrong_params_entry_names_its_key(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("m2r: {reward: m2r_typo}\nm2r_stages: {\"1\": {prev: 0, segment: m2r_stage1}}\n")
    with pytest.raises(KeyError, match=r"m2r\.reward.*'m2r_typo'"):
        recipe.reward_function(load_section(M2RParams, path).reward)
    path.write_text("m2r: {lr_typo: 1.0}\n")
    with pytest.raises(ConfigError, match=r"m2r: unknown key\(s\) \['lr_typo'\]"):
        load_section(M2RParams, path)
    path.write_text("m2r_stages: {\"1\": {prev: 0, segment: all, format: 3}}\n")
    with pytest.raises(ConfigError, match=r"m2r_stages.stages\[0\].format|m2r_stages.*format"):
        load_section(M2RStagesParams, path)
    stages = (M2RStageParams(id=1, prev=0, segment="m2r_stage1"),
              M2RStageParams(id=2, prev=1, segment="m2r_stage2", start="segments/all.parquet"))
    with pytest.raises(ConfigError, match=r"m2r_stages\.2\.start: .*'m2r/model_1'"):
        recipe.find_stage(stages, 2)
    with pytest.raises(ConfigError, match=r"m2r_stages\.1\.prev"):
        recipe.find_stage((M2RStageParams(id=1, prev=3, segment="all"),), 1)


def test_the_stage_stops_on_a_wrong_reward_before_loading_anything(tmp_path, monkeypatch):
    from stages import train_m2r

    monkeypatch.chdir(tmp_path)
    Path("params.yaml").write_text("m2r: {reward: nope}\nm2r_stages: {\"1\": {prev: 0, segment: m2r_stage1}}\n")
    with pytest.raises(KeyError, match="m2r.reward"):
        train_m2r.main("1")


# --- one stage end to end ---------------------------------------------------------------------------


def test_one_stage_end_to_end_records_failures_wall_time_and_memory(tmp_path, monkeypatch):
    from factrl.recipes.m2r import run_stage
    from factrl.retrieval.index import Retriever
    from tests.rl.tiny import tiny_model, tokenizer
    from tests.stages.test_train import tiny_world

    claims, index = tiny_world(tmp_path / "world")
    tok = tokenizer()
    params = M2RParams(group_size=2, prompts_per_step=2, steps=1, lr=5e-5, micro_batch_size=4, max_new_tokens=24,
                       checkpoint_every=1, max_turns=4, max_context_tokens=1024, max_tool_response_tokens=64,
                       retrieval_mode="bm25", precision="fp32", seed=1, warm_max_items=4, warm_max_length=1024,
                       sft=SFTParams(max_steps=1, batch_size=2, checkpoint_every=1))
    stage = M2RStageParams(id=1, prev=0, segment="m2r_stage1", format=1)
    out = run_stage(claims, claims, Retriever(index, mode="bm25"), params, stage, init_model="smollm2-135m",
                    state_dir=tmp_path / "ck" / "m2r_r1", out_model=tmp_path / "models" / "m2r_1",
                    curves_dir=tmp_path / "metrics" / "m2r_r1", model_tokenizer=(tiny_model(tok), tok))
    saved = json.loads(json.dumps(out))  # what the stage writes to metrics/m2r/train_r<id>.json
    assert saved["wall_s"] > 0 and saved["peak_rss_mib"] > 100
    assert saved["warm_start"]["references"] >= 1 and saved["warm_start"]["steps"] == 1
    assert saved["steps"] == 1 and saved["rollouts"] == params.group_size * params.prompts_per_step
    # a random policy writes no valid M2R response: every rollout is a counted format failure, none crashed
    assert saved["format_failures"] == saved["rollouts"] and sum(saved["format_failures_by_reason"].values()) == 4
    assert (tmp_path / "models" / "m2r_1" / "config.json").exists()
    assert saved["init_model"].endswith("m2r_r1_warm/model")
    assert dataclasses.asdict(stage) == saved["stage"]


def test_base_model_base_names_the_params_model(tmp_path, monkeypatch):
    """``m2r.base_model: base`` (the default) starts stage 0 from params ``model.base``."""
    import pyarrow.parquet as pq

    from factrl.data.schemas import CLAIMS
    from stages import train_m2r

    monkeypatch.chdir(tmp_path)
    Path("params.yaml").write_text("model: {base: ./my-base}\nm2r_stages: {\"1\": {prev: 0, segment: m2r_stage1}}\n")
    Path("segments").mkdir()
    for name in ("m2r_stage1", "all"):
        pq.write_table(CLAIMS.empty_table(), f"segments/{name}.parquet")
    seen = {}
    record = {"steps": 0, "prompts": 0, "format_failures": 0, "rollouts": 0, "wall_s": 0.0, "peak_rss_mib": 0.0}
    monkeypatch.setattr(train_m2r.recipe, "run_stage", lambda *a, **kw: seen.update(kw) or record)
    monkeypatch.setattr("factrl.retrieval.index.Retriever", lambda *a, **kw: None)
    train_m2r.main("1")
    assert seen["init_model"] == "./my-base"
