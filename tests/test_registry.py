"""Registries: names resolve, unknown names list the known ones, and every params field that names
registry entries accepts exactly the registered ones, read from the registry when params load (so the
config rejects, with the key in the error, any name the code would not find, and a new registration
needs no params edit)."""

from __future__ import annotations

import dataclasses

import pytest

from factrl.agents.systems_registry import SYSTEMS, RegisteredSystem, system_names
from factrl.config import ConfigError, from_dict, registry_names
from factrl.eval.calibration import METHODS, Calibrator
from factrl.eval.params import EvaluateParams
from factrl.eval.systems import build_systems
from factrl.registry import Registry, UnknownName
from factrl.rl.kl import KL_ESTIMATORS
from factrl.rl.losses import LOSS_AGGREGATIONS
from factrl.rl.params import GRPOParams


def test_registry_lookup_and_duplicates():
    reg: Registry = Registry("thing", hint=" (a hint)")

    @reg.register("a", "alias")
    def a():
        return 1

    assert reg.lookup("a") is a and reg.lookup("alias") is a and sorted(reg) == ["a", "alias"]
    with pytest.raises(UnknownName, match=r"unknown thing 'b'; registered: \['a', 'alias'\] \(a hint\)"):
        reg.lookup("b")
    with pytest.raises(ValueError, match="thing 'a' is already registered by"):
        reg.add("a", lambda: 2)
    assert reg.add("a", a) is a  # the same entry again is a no-op


@pytest.mark.parametrize(("cls", "field", "registry"), [
    (GRPOParams, "loss_agg", LOSS_AGGREGATIONS),
    (GRPOParams, "kl_type", KL_ESTIMATORS),
])
def test_params_names_are_the_registered_entries(cls, field, registry):
    """The params field accepts exactly the registry's names: it reads them from the registry."""
    meta = next(f.metadata for f in dataclasses.fields(cls) if f.name == field)
    assert set(registry_names(meta)) == set(registry)
    for name in registry:
        assert getattr(from_dict(cls, {field: name}, "x"), field) == name


def test_systems_are_haris_and_the_registered_baselines():
    assert system_names() == tuple(SYSTEMS) and system_names()[0] == "haris"
    assert {"single_agent", "rag", "decompose_verify"} <= set(SYSTEMS)
    assert [name for name in SYSTEMS if SYSTEMS[name].pair] == ["haris"]  # the one system on a model pair


def test_evaluate_systems_are_read_from_the_baseline_registry(monkeypatch):
    """``evaluate.systems`` names haris and the registered baselines: an unknown name fails at load
    naming its key, and a baseline registered elsewhere is accepted without editing the params module."""
    with pytest.raises(ConfigError, match=r"evaluate\.systems\[1\]: 'oracle' is not a registered name; use one of "
                                          r"\['decompose_verify', 'haris', 'rag', 'single_agent'\]"):
        from_dict(EvaluateParams, {"systems": ["haris", "oracle"]}, "evaluate")
    oracle = RegisteredSystem("Oracle", lambda claims, llm, retriever, **limits: [])
    monkeypatch.setitem(SYSTEMS, "oracle", oracle)
    assert from_dict(EvaluateParams, {"systems": ["haris", "oracle"]}, "evaluate").systems == ("haris", "oracle")
    [system] = build_systems(["oracle"], [], "m", load_llm=lambda spec: None)
    assert system.name == "Oracle" and system.kind == "oracle"


def test_calibration_method_is_read_from_the_methods_registry(monkeypatch):
    with pytest.raises(ConfigError, match=r"evaluate\.calibration\.method: 'platt' is not a registered name; "
                                          r"use one of \['grounded', 'isotonic', 'none', 'temperature'\]"):
        from_dict(EvaluateParams, {"calibration": {"method": "platt"}}, "evaluate")
    monkeypatch.setitem(METHODS, "platt", METHODS["temperature"])
    assert from_dict(EvaluateParams, {"calibration": {"method": "platt"}}, "evaluate").calibration.method == "platt"
    assert Calibrator("platt").fit([0.9, 0.2, 0.8, 0.4], [1, 0, 1, 1]).n == 4


def test_unregistered_name_in_params_names_the_key():
    with pytest.raises(ConfigError, match=r"train\.search\.kl_type: 'k9' is not a registered KL estimator; use one of \["):
        from_dict(GRPOParams, {"kl_type": "k9"}, "train.search")
    assert from_dict(GRPOParams, {"kl_type": "k3+"}, "x").kl_type == "k3+"  # the straight-through variant
    with pytest.raises(ConfigError, match=r"train\.search\.loss_agg: 'mean' is not a registered loss aggregation"):
        from_dict(GRPOParams, {"loss_agg": "mean"}, "train.search")
