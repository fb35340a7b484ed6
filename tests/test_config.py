"""Every params section in the repo loads into its dataclass; bad params give located errors."""

from __future__ import annotations

import pytest
import yaml

from factrl import config


def test_every_section_of_repo_params_loads(repo_root):
    raw = config.read_params(repo_root / "params.yaml")
    assert set(raw) == set(config.SECTIONS), "params.yaml and config.SECTIONS must list the same sections"
    for name in raw:
        section = config.load_section(name, repo_root / "params.yaml")
        assert isinstance(section, config.SECTIONS[name])
        # round trip: what to_dict writes loads back to an equal object
        assert config.from_dict(type(section), config.to_dict(section), name) == section


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"prepare": {"sourc": "world"}}, "prepare: unknown key"),
        ({"prepare": {"source": "web"}}, "prepare.source: 'web' is not one of"),
        ({"prepare": {"world": {"seed": "x"}}}, "prepare.world.seed: expected an integer"),
        ({"prepare": {"split_fractions": [0.5, 0.5]}}, "prepare.split_fractions: expected 3 items"),
        ({"rounds": {1: {"prev": 0, "segment": "all"}}}, 'rounds.1: quote the id'),
        ({"rounds": {"r1": {"prev": 0, "segment": "all"}}}, "rounds.r1: the key must be a round id"),
        ({"rounds": {"1": {"id": 1, "prev": 0, "segment": "all"}}}, "rounds.1: unknown key 'id'"),
        ({"rounds": [{"id": 1, "prev": 0, "segment": "all"}]}, "rounds: expected a mapping of id -> entry"),
        ({"train": {"search": {"precision": "fp16"}}}, "train.search.precision: 'fp16' is not one of"),
        ({"train": {"reasoning": {"device": "gpu"}}}, "train.reasoning.device: 'gpu' is not a device"),
        ({"synthesize": {"teacher": {"device": "cuda:x"}}}, "synthesize.teacher.device: 'cuda:x' is not a device"),
        ({"index": {"device": 0}}, "index.device: 0 is not a device"),
        ({"evaluate": {"device": "CPU"}}, "evaluate.device: 'CPU' is not a device"),
    ],
)
def test_bad_params_name_the_key(tmp_path, edit, message):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(edit))
    with pytest.raises(config.ConfigError, match=message.replace("(", r"\(")):
        config.load_section(next(iter(edit)), path)


def test_rounds_are_keyed_by_id_in_id_order(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text('rounds:\n  "2": {prev: 1, segment: seg1}\n  "1": {prev: 0, segment: all, questions: first}\n')
    rounds = config.load_section("rounds", path).rounds
    assert [(r.id, r.prev, r.segment, r.questions) for r in rounds] == [(1, 0, "all", "first"), (2, 1, "seg1", "all")]


def test_sections_are_frozen(repo_root):
    section = config.load_section("prepare", repo_root / "params.yaml")
    with pytest.raises(AttributeError):
        section.seed = 1


def test_device_names_load_and_a_missing_cuda_names_the_key(tmp_path):
    """Params validate the name; availability is checked where the model loads, naming the key."""
    import torch

    from factrl.recipes.haris_rounds import train_device

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"train": {"search": {"device": "cuda:1"}, "reasoning": {"device": "cpu"}}}))
    train = config.load_section("train", path)
    assert (train.search.device, train.reasoning.device) == ("cuda:1", "cpu")
    assert train_device("reason", train.reasoning) == torch.device("cpu")
    missing = "cuda:99" if torch.cuda.is_available() else "cuda"
    with pytest.raises(ValueError, match=rf"train\.search\.device: '{missing}', but"):
        train_device("search", config.from_dict(config.SearchTrainParams, {"device": missing}, "train.search"))
