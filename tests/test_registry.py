"""Registries: names resolve, unknown names list the known ones, and every params Literal that names
registry entries names exactly the registered ones (so the config rejects, with the key in the error,
any name the code would not find)."""

from __future__ import annotations

import typing

import pytest

from factrl.config import ConfigError, EvaluateParams, GRPOParams, from_dict
from factrl.eval.runner import BASELINES, SYSTEMS
from factrl.registry import Registry, UnknownName
from factrl.rl.kl import KL_ESTIMATORS
from factrl.rl.losses import LOSS_AGGREGATIONS


def _literal(cls: type, field: str) -> set[str]:
    tp = typing.get_type_hints(cls)[field]
    while typing.get_origin(tp) is not typing.Literal:  # tuple[Literal[...], ...]
        tp = typing.get_args(tp)[0]
    return set(typing.get_args(tp))


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
    (EvaluateParams, "systems", {"haris": None, **BASELINES}),
])
def test_params_literals_name_the_registered_entries(cls, field, registry):
    assert _literal(cls, field) == set(registry)


def test_systems_are_haris_and_the_registered_baselines():
    assert SYSTEMS == ("haris", *BASELINES) and {"single_agent", "rag", "decompose_verify"} <= set(BASELINES)


def test_unregistered_name_in_params_names_the_key():
    with pytest.raises(ConfigError, match=r"train\.search\.kl_type: 'k9' is not one of"):
        from_dict(GRPOParams, {"kl_type": "k9"}, "train.search")
