"""Every params section in the repo loads into its dataclass; bad params give located errors."""

from __future__ import annotations

import pytest
import yaml

from factrl import config
from factrl.sections import all_sections, load_any

SECTIONS = all_sections()


def test_every_section_of_repo_params_loads(repo_root):
    raw = config.read_params(repo_root / "params.yaml")
    assert set(raw) == set(SECTIONS), "params.yaml must list exactly the registered sections"
    for name in raw:
        section = load_any(name, repo_root / "params.yaml")
        assert isinstance(section, SECTIONS[name])
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
        ({"evaluate": {"precision": "fp16"}}, "evaluate.precision: 'fp16' is not one of"),
        ({"train": {"reasoning": {"require_question": "per_claim"}}},
         "train.reasoning.require_question: 'per_claim' matches none of"),
    ],
)
def test_bad_params_name_the_key(tmp_path, edit, message):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(edit))
    with pytest.raises(config.ConfigError, match=message.replace("(", r"\(")):
        load_any(next(iter(edit)), path)


def test_rounds_are_keyed_by_id_in_id_order(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text('rounds:\n  "2": {prev: 1, segment: seg1}\n  "1": {prev: 0, segment: all, questions: first}\n')
    rounds = load_any("rounds", path).rounds
    assert [(r.id, r.prev, r.segment, r.questions) for r in rounds] == [(1, 0, "all", "first"), (2, 1, "seg1", "all")]


def test_sections_are_frozen(repo_root):
    section = load_any("prepare", repo_root / "params.yaml")
    with pytest.raises(AttributeError):
        section.seed = 1


def test_device_names_load_and_a_missing_cuda_names_the_key(tmp_path):
    """Params validate the name; availability is checked where the model loads, naming the key."""
    import torch

    from factrl.recipes.haris.params import SearchTrainParams
    from factrl.rl.runs import train_device

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"train": {"search": {"device": "cuda:1"}, "reasoning": {"device": "cpu"}}}))
    train = load_any("train", path)
    assert (train.search.device, train.reasoning.device) == ("cuda:1", "cpu")
    assert train_device(train.reasoning, "train.reasoning") == torch.device("cpu")
    missing = "cuda:99" if torch.cuda.is_available() else "cuda"
    with pytest.raises(ValueError, match=rf"train\.search\.device: '{missing}', but"):
        train_device(config.from_dict(SearchTrainParams, {"device": missing}, "train.search"), "train.search")


def test_repo_params_name_the_base_policy_once(repo_root):
    """Only section model names the base policy; the agents' settings refer to it as `base`."""
    raw = config.read_params(repo_root / "params.yaml")
    base = raw["model"]["base"]
    for section in ("warmup", "evaluate", "debate"):
        assert base not in yaml.safe_dump(raw[section]), f"params.yaml: {section} names {base}; write `base`"


def test_exponent_floats_without_a_dot_are_numbers(tmp_path):
    """`lr: 1e-5` is a float to DVC (YAML 1.2) but a string to PyYAML (1.1): both must agree."""
    path = tmp_path / "params.yaml"
    path.write_text("train:\n  search: {lr: 1e-5, kl_coef: 5e-03}\n  reasoning: {lr: 2.0e-5}\n")
    assert yaml.safe_load(path.read_text())["train"]["search"]["lr"] == "1e-5"  # what the loader is given
    train = load_any("train", path)
    assert (train.search.lr, train.search.kl_coef, train.reasoning.lr) == (1e-5, 5e-3, 2e-5)
    path.write_text("train:\n  search: {lr: fast}\n")
    with pytest.raises(config.ConfigError, match=r"train\.search\.lr: expected a number, got 'fast'"):
        load_any("train", path)


@pytest.mark.parametrize("rule", [False, True, "per_hop"])
def test_require_question_takes_a_bool_or_per_hop(tmp_path, rule):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"train": {"reasoning": {"require_question": rule}}}))
    assert load_any("train", path).reasoning.require_question == rule


def test_sections_register_under_their_key_and_load_by_class_or_name(tmp_path):
    from dataclasses import dataclass

    from factrl.data.params import PrepareParams
    from factrl.rl.params import GRPOParams

    path = tmp_path / "params.yaml"
    path.write_text("prepare: {seed: 3}\n")
    assert config.SECTIONS["prepare"] is PrepareParams and PrepareParams.PARAMS_KEY == "prepare"
    assert config.load_section(PrepareParams, path) == config.load_section("prepare", path) == PrepareParams(seed=3)
    with pytest.raises(TypeError, match="GRPOParams is not a params section"):
        config.load_section(GRPOParams, path)  # nested in the train sections, no section of its own
    with pytest.raises(config.ConfigError, match="params section 'nope' is not registered"):
        config.load_section("nope", path)

    @dataclass(frozen=True)
    class Other:
        seed: int = 0

    with pytest.raises(ValueError, match="params section 'prepare' is already factrl.data.params.PrepareParams"):
        config.params_section("prepare")(Other)
