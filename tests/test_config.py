"""Every params section in the repo loads into its dataclass; bad params give located errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from factrl import config


def test_every_section_of_repo_params_loads(repo_root):
    from factrl.profiles import OTHER_SECTIONS

    raw = config.read_params(repo_root / "params.yaml")
    assert set(raw) == set(config.SECTIONS) | set(OTHER_SECTIONS), \
        "params.yaml must list exactly config.SECTIONS and profiles.OTHER_SECTIONS (loaded beside their code)"
    for name, load in OTHER_SECTIONS.items():
        section = load(repo_root / "params.yaml")
        assert config.from_dict(type(section), config.to_dict(section), name) == section
    for name in set(raw) - set(OTHER_SECTIONS):
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
        ({"evaluate": {"precision": "fp16"}}, "evaluate.precision: 'fp16' is not one of"),
        ({"train": {"reasoning": {"require_question": "per_claim"}}},
         "train.reasoning.require_question: 'per_claim' matches none of"),
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

    from factrl.rl.runs import train_device

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"train": {"search": {"device": "cuda:1"}, "reasoning": {"device": "cpu"}}}))
    train = config.load_section("train", path)
    assert (train.search.device, train.reasoning.device) == ("cuda:1", "cpu")
    assert train_device("reason", train.reasoning) == torch.device("cpu")
    missing = "cuda:99" if torch.cuda.is_available() else "cuda"
    with pytest.raises(ValueError, match=rf"train\.search\.device: '{missing}', but"):
        train_device("search", config.from_dict(config.SearchTrainParams, {"device": missing}, "train.search"))


# --------------------------------------------------------------------------------------------
# model: the base policy named once; symbolic checkpoint names resolved in one function
# --------------------------------------------------------------------------------------------

TWO_ROUNDS = {"1": {"prev": 0, "segment": "all"}, "2": {"prev": 1, "segment": "seg1"}}


def _params(tmp_path, base="smollm2-135m", rounds=TWO_ROUNDS):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"model": {"base": base}, "rounds": rounds}))
    return path


@pytest.mark.parametrize("spec, agent, expected", [
    ("base", "reason", "smollm2-135m"),
    ("base", None, "smollm2-135m"),            # the baselines' / the warm start's model
    ("warm", "reason", "models/reason_0"),
    ("warm", "search", "models/search_0"),
    ("last", "reason", "models/reason_2"),     # the highest round id of params rounds
    ("last", "search", "models/search_2"),
    ("r1", "search", "models/search_1"),
    ("r0", "reason", "models/reason_0"),
    ("models/reason_1", "reason", "models/reason_1"),  # anything that is a model itself stays
    ("smollm2-135m", "search", "smollm2-135m"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", None, "HuggingFaceTB/SmolLM2-135M-Instruct"),
])
def test_symbolic_model_names_resolve(tmp_path, spec, agent, expected):
    assert config.resolve_model(spec, agent, where="x.model", params_file=_params(tmp_path)) == str(Path(expected))


def test_base_and_last_follow_their_one_key(tmp_path):
    """Changing model.base or adding a round moves every place that names them symbolically."""
    params = _params(tmp_path, base="./my-base", rounds=TWO_ROUNDS | {"3": {"prev": 2, "segment": "seg2"}})
    assert config.resolve_model("base", "reason", where="x", params_file=params) == "./my-base"
    assert config.resolve_model("last", "search", where="x", params_file=params) == str(Path("models/search_3"))
    assert config.load_section("model", params).base == "./my-base"


@pytest.mark.parametrize("spec, agent, edit, message", [
    ("lats", "reason", {}, r"params.yaml:debate.pool\[0\].model: unknown model name 'lats'; use a symbolic name"),
    ("r5", "reason", {}, r"debate.pool\[0\].model: 'r5': round 5 is not in params rounds \(ids: \[1, 2\]"),
    ("last", "search", {"rounds": {}}, r"debate.pool\[0\].model: 'last' names the last round's search agent, "
                                       r"but params rounds is empty"),
    ("warm", None, {}, r"debate.pool\[0\].model: 'warm' names an agent's checkpoint"),
    ("base", "reason", {"base": "last"}, r"params.yaml:model.base: 'last' is a symbolic name"),
    ("base", "reason", {"base": "smolm2"}, r"params.yaml:model.base: unknown model name 'smolm2'"),
])
def test_wrong_model_names_are_errors_naming_the_key(tmp_path, spec, agent, edit, message):
    params = _params(tmp_path, **edit)
    with pytest.raises(config.ConfigError, match=message):
        config.resolve_model(spec, agent, where="debate.pool[0].model", params_file=params)


def test_api_models_keep_their_names_but_symbolic_ones_resolve(tmp_path):
    params = _params(tmp_path)
    assert config.resolve_model("gpt-4o-mini", "reason", where="x", params_file=params, api=True) == "gpt-4o-mini"
    last = config.resolve_model("last", "reason", where="x", params_file=params, api=True)
    assert last == str(Path("models/reason_2"))


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
    train = config.load_section("train", path)
    assert (train.search.lr, train.search.kl_coef, train.reasoning.lr) == (1e-5, 5e-3, 2e-5)
    path.write_text("train:\n  search: {lr: fast}\n")
    with pytest.raises(config.ConfigError, match=r"train\.search\.lr: expected a number, got 'fast'"):
        config.load_section("train", path)


@pytest.mark.parametrize("rule", [False, True, "per_hop"])
def test_require_question_takes_a_bool_or_per_hop(tmp_path, rule):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"train": {"reasoning": {"require_question": rule}}}))
    assert config.load_section("train", path).reasoning.require_question == rule
