"""One agent registry (factrl.agents.registry): every place that names HARIS's agents reads it."""

from __future__ import annotations

import pytest
import yaml

from factrl import model_names
from factrl.agents import protocol
from factrl.agents.registry import AGENTS, agent, by_stage
from factrl.recipes import train_cli, warmup
from factrl.recipes.haris import verl_rounds
from factrl.recipes.haris.params import TrainParams
from factrl.registry import UnknownName


def test_one_name_per_agent_everywhere(repo_root):
    names = set(AGENTS)
    assert names == {"reason", "search"}
    assert set(model_names.AGENTS) == names  # symbolic model names, checkpoint_of
    assert {AGENTS[n].role for n in names} == set(verl_rounds.MESSAGES)  # a verl row's prompt per role
    assert set(warmup.MODEL_NAMES.values()) == names  # the warm start's models/<name>_0
    assert {AGENTS[n].params_key for n in names} == {"train.reasoning", "train.search"}
    assert set(train_cli.STAGES) == {"train_reason", "train_search"}
    stages = set(yaml.safe_load((repo_root / "dvc.yaml").read_text(encoding="utf-8"))["stages"])
    assert {spec.train_stage for spec in AGENTS.values()} <= stages
    assert {spec.role for spec in AGENTS.values()} == set(protocol.PARSERS)  # a parser per role


def test_each_agent_reads_its_own_params_section():
    train = TrainParams()
    assert agent("reason").train_params(train) is train.reasoning
    assert agent("search").train_params(train) is train.search
    assert by_stage("train_reason") is agent("reason")


def test_an_unknown_agent_or_stage_is_an_error_listing_the_known_ones():
    with pytest.raises(UnknownName, match="'reason', 'search'"):
        agent("reasoning")
    with pytest.raises(KeyError, match="train_reason"):
        by_stage("train_march")
    with pytest.raises(ValueError, match="train_reason@<round> or train_search@<round>"):
        train_cli.parse_stage("train_march@1")


def test_each_agent_has_one_round_run_and_its_paths_come_from_the_registry():
    """run_train(agent, round) serves every registered agent, and reads and writes where its spec says."""
    from pathlib import Path

    from factrl.model_names import RoundParams
    from factrl.recipes.haris.train import ROUND_RUNS, RoundPaths

    assert set(ROUND_RUNS) == set(AGENTS)
    paths = RoundPaths.of("reason", RoundParams(id=2, prev=1, segment="seg1"))
    assert paths == RoundPaths(Path("models/reason_1"), Path("models/reason_2"), Path("checkpoints/reason_r2"),
                               Path("metrics/train/reason_r2"))
    assert agent("search").curves_dir(1, "/m") == Path("/m/search_r1")
