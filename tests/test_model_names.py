"""The model section and the symbolic checkpoint names (``factrl.model_names``): the base policy is named
once, and ``base`` / ``warm`` / ``last`` / ``r<id>`` resolve in one function, with errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from factrl.config import ConfigError, load_section
from factrl.model_names import ModelParams, resolve_model

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
    assert resolve_model(spec, agent, where="x.model", params_file=_params(tmp_path)) == str(Path(expected))


def test_base_and_last_follow_their_one_key(tmp_path):
    """Changing model.base or adding a round moves every place that names them symbolically."""
    params = _params(tmp_path, base="./my-base", rounds=TWO_ROUNDS | {"3": {"prev": 2, "segment": "seg2"}})
    assert resolve_model("base", "reason", where="x", params_file=params) == "./my-base"
    assert resolve_model("last", "search", where="x", params_file=params) == str(Path("models/search_3"))
    assert load_section(ModelParams, params).base == "./my-base"


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
    with pytest.raises(ConfigError, match=message):
        resolve_model(spec, agent, where="debate.pool[0].model", params_file=params)


def test_api_models_keep_their_names_but_symbolic_ones_resolve(tmp_path):
    params = _params(tmp_path)
    assert resolve_model("gpt-4o-mini", "reason", where="x", params_file=params, api=True) == "gpt-4o-mini"
    last = resolve_model("last", "reason", where="x", params_file=params, api=True)
    assert last == str(Path("models/reason_2"))
