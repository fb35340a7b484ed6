"""The serve section: defaults equal evaluate's, errors name the key, checkpoints resolve symbolically."""

from __future__ import annotations

import pytest

from factrl.config import ConfigError
from factrl.eval.params import EvaluateParams
from factrl.service.params import ServeParams, index_hash, load_serve_params, params_hash, resolve_checkpoints


def test_defaults_follow_evaluate_and_the_repo_section_loads(repo_root):
    for key in ("top_k", "max_turns", "max_new_tokens", "retrieval_mode"):
        assert getattr(ServeParams(), key) == getattr(EvaluateParams(), key)
    params = load_serve_params(repo_root / "params.yaml")
    assert params.host == "127.0.0.1" and params.checkpoints[0].reason == "last"


def test_bad_params_name_the_key(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("serve: {batch_size: 0}\n")
    with pytest.raises(ConfigError, match="serve.batch_size must be >= 1"):
        load_serve_params(path)
    path.write_text("serve: {prices: {gpt: [1, 2, 3]}}\n")
    with pytest.raises(ConfigError, match="serve.prices.gpt: expected 2 items"):
        load_serve_params(path)
    path.write_text("serve: {decomposer: llm}\n")
    with pytest.raises(ConfigError, match="serve.decomposer_model"):
        load_serve_params(path)
    path.write_text("serve: {portt: 1}\n")
    with pytest.raises(ConfigError, match="serve: unknown key"):
        load_serve_params(path)


def test_checkpoints_resolve_like_evaluate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(
        'model: {base: smollm2-135m}\nrounds: {"1": {prev: 0, segment: all}}\n'
        "serve:\n  checkpoints:\n    - {name: t, reason: last, search: warm}\n"
        "    - {name: b, reason: base, search: 'openai:m@http://h/v1'}\n")
    params = load_serve_params()
    with pytest.raises(FileNotFoundError, match=r"serve.checkpoints\[0\].reason: last = models/reason_1 does not exist"):
        resolve_checkpoints(params)
    (tmp_path / "models" / "reason_1").mkdir(parents=True)
    (tmp_path / "models" / "search_0").mkdir(parents=True)
    t, b = resolve_checkpoints(params)
    assert (t.reason, t.search) == ("models/reason_1", "models/search_0")
    assert (b.reason, b.search) == ("smollm2-135m", "openai:m@http://h/v1")
    assert params_hash(params) != params_hash(ServeParams()) and len(index_hash(tmp_path)) == 16
