"""Every profile in profiles/ applies onto params.yaml and loads into the params dataclasses."""

from __future__ import annotations

import shutil

import pytest

from factrl import config, profiles
from factrl.model_names import resolve_model
from factrl.sections import load_any


def _profile_names(repo_root):
    return sorted(p.stem for p in (repo_root / "profiles").glob("*.yaml"))


def test_profiles_exist(repo_root):
    assert {"tiny", "long", "paper"} <= set(_profile_names(repo_root))


@pytest.mark.parametrize("name", ["tiny", "long", "paper"])
def test_profile_applies_and_every_section_loads(repo_root, tmp_path, name):
    params = tmp_path / "params.yaml"
    shutil.copy(repo_root / "params.yaml", params)
    overrides = profiles.read_profile(name, repo_root / "profiles")
    profiles.apply_profile(name, params, repo_root / "profiles")
    text = params.read_text()
    assert "# factrl parameters" in text  # params.yaml's comments survive
    for section in config.read_params(params):
        load_any(section, params)
    # the overrides are what the stages now read
    rounds = load_any("rounds", params).rounds
    assert [r.id for r in rounds] == sorted(int(k) for k in overrides["rounds"])
    train = load_any("train", params)
    for agent, key in (("search", "search"), ("reasoning", "reasoning")):
        for k, v in overrides["train"][key].items():
            assert getattr(getattr(train, agent), k) == v
    # keys the profile does not name keep params.yaml's values
    assert load_any("pipeline", params) == load_any("pipeline", repo_root / "params.yaml")


def test_paper_profile_has_the_paper_defaults(repo_root, tmp_path):
    params = tmp_path / "params.yaml"
    shutil.copy(repo_root / "params.yaml", params)
    profiles.apply_profile("paper", params, repo_root / "profiles")
    train = load_any("train", params)
    for agent in (train.search, train.reasoning):
        assert (agent.lr, agent.kl_coef, agent.temperature, agent.group_size) == (1e-6, 0.001, 1.0, 5)
    assert len(load_any("rounds", params).rounds) == 4
    warmup = load_any("warmup", params)
    assert not warmup.enabled and load_any("model", params).base == "Qwen/Qwen3-4B"  # H_0 = the base model
    assert resolve_model(warmup.base_model, None, where="warmup.base_model", params_file=params) == "Qwen/Qwen3-4B"
    # verl on GPUs: tensor parallel 2, batch 48, 8,192-token context; GPT-4o teacher, GPT-4o-mini judge
    assert train.backend == "verl" and train.verl.tensor_parallel_size == 2
    for agent in (train.search, train.reasoning):
        assert (agent.prompts_per_step, agent.max_context_tokens) == (48, 8192)
    teacher = load_any("synthesize", params).teacher
    assert (teacher.backend, teacher.model) == ("openai", "gpt-4o")
    assert (train.search.judge, train.search.judge_model) == ("llm", "openai:gpt-4o-mini")


def test_demo_and_long_profiles_warm_start_the_agents(repo_root, tmp_path):
    assert load_any("warmup", repo_root / "params.yaml").enabled
    params = tmp_path / "params.yaml"
    shutil.copy(repo_root / "params.yaml", params)
    profiles.apply_profile("long", params, repo_root / "profiles")
    assert load_any("warmup", params).enabled


def test_rounds_of_a_profile_replace_the_whole_schedule(repo_root, tmp_path):
    """Rounds are keyed by id: a profile's rounds are the schedule, not merged into the old one."""
    params = tmp_path / "params.yaml"
    shutil.copy(repo_root / "params.yaml", params)
    profiles.apply_profile("paper", params, repo_root / "profiles")
    (tmp_path / "one.yaml").write_text("rounds:\n  \"1\": {prev: 0, segment: all, questions: first}\n")
    profiles.apply_profile(tmp_path / "one.yaml", params, repo_root / "profiles")
    assert [r.id for r in load_any("rounds", params).rounds] == [1]


def test_bad_profile_is_rejected_and_params_untouched(repo_root, tmp_path):
    params = tmp_path / "params.yaml"
    shutil.copy(repo_root / "params.yaml", params)
    before = params.read_text()
    (tmp_path / "bad.yaml").write_text("train:\n  search:\n    lrr: 1\n")
    with pytest.raises(config.ConfigError, match=r"train.search: unknown key"):
        profiles.apply_profile(tmp_path / "bad.yaml", params, repo_root / "profiles")
    assert params.read_text() == before
    (tmp_path / "worse.yaml").write_text("trian: {}\n")
    with pytest.raises(config.ConfigError, match="unknown section"):
        profiles.apply_profile(tmp_path / "worse.yaml", params, repo_root / "profiles")
    with pytest.raises(config.ConfigError, match="no such profile"):
        profiles.read_profile("nope", repo_root / "profiles")
