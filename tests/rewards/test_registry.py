"""Reward families and kinds: every built-in reward is registered once with its kind, a name resolves
only to a reward of the kind the caller calls and of a family it loads, and the errors say which."""

from __future__ import annotations

import subprocess
import sys

import pytest

from factrl.registry import UnknownName
from factrl.rewards import haris, m2r, maporl, march
from factrl.rewards.registry import (
    KIND_CALLS,
    RewardFamily,
    RewardKind,
    WrongRewardKind,
    choose_reward,
    family_modules,
    family_of,
)

FAMILIES = {"haris": haris, "m2r": m2r, "maporl": maporl, "march": march}
BUILTIN = {
    "haris_reasoning": RewardKind.CLAIM_VERDICT, "haris_search": RewardKind.SEARCH_REPORT,
    "m2r": RewardKind.ANSWER, "march_ztr": RewardKind.EPISODE, "march_err": RewardKind.EPISODE,
    "maporl_reasoning": RewardKind.CLAIM_VERDICT, "maporl_immediate": RewardKind.VERIFIER_SHAPE,
    "maporl_cumulative": RewardKind.VERIFIER_SHAPE, "maporl_influence": RewardKind.VERIFIER_SHAPE,
}


def test_every_builtin_reward_is_registered_in_its_family_with_its_kind():
    assert family_modules() == sorted(FAMILIES)
    found = {}
    for family, module in FAMILIES.items():
        assert module.REWARDS.family == family
        for name, spec in module.REWARDS.items():
            assert spec.name == name and spec.family == family and callable(spec.fn)
            assert family_of(name) == family
            found[name] = spec.kind
    assert found == BUILTIN
    assert set(KIND_CALLS) == set(RewardKind)  # every kind's call convention is written out


def test_a_name_resolves_to_the_function_of_the_kind_asked_for():
    assert choose_reward("haris_reasoning", RewardKind.CLAIM_VERDICT, haris.REWARDS) is haris.reasoning_reward
    fn = choose_reward("maporl_reasoning", RewardKind.CLAIM_VERDICT, haris.REWARDS, maporl.REWARDS)
    assert fn is maporl.reasoning_verifier_reward
    assert choose_reward("march_err", RewardKind.EPISODE, march.REWARDS) is march.error_rate_reward


def test_a_reward_of_another_kind_is_a_clear_error():
    with pytest.raises(WrongRewardKind) as err:
        choose_reward("haris_search", RewardKind.CLAIM_VERDICT, haris.REWARDS, maporl.REWARDS,
                      key="train.reasoning.reward")
    message = str(err.value)
    assert message.startswith("params train.reasoning.reward: reward 'haris_search' is a search_report reward")
    assert "needs a claim_verdict reward" in message
    assert "['haris_reasoning', 'maporl_reasoning']" in message  # what would fit
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)  # callers catching a bad name
    with pytest.raises(WrongRewardKind, match="maporl_reasoning' is a claim_verdict reward"):
        choose_reward("maporl_reasoning", RewardKind.VERIFIER_SHAPE, maporl.REWARDS)


def test_a_reward_of_a_family_the_caller_does_not_load_names_that_family():
    # march's rewards are registered in this process (imported above), but the caller loads haris only
    with pytest.raises(UnknownName) as err:
        choose_reward("march_ztr", RewardKind.CLAIM_VERDICT, haris.REWARDS, key="train.reasoning.reward")
    message = str(err.value)
    assert "'march' family (factrl.rewards.march), which is not loaded here" in message
    assert "['haris']: ['haris_reasoning']" in message
    assert not isinstance(err.value, WrongRewardKind)


def test_an_unknown_name_lists_what_the_loaded_families_offer():
    with pytest.raises(UnknownName, match=r"unknown reward 'haris_reasonin'; the claim_verdict rewards of "
                                          r"\['haris'\]: \['haris_reasoning'\]"):
        choose_reward("haris_reasonin", RewardKind.CLAIM_VERDICT, haris.REWARDS)
    with pytest.raises(UnknownName, match="unknown reward 'nothing'"):
        choose_reward("nothing", RewardKind.EPISODE, march.REWARDS)
    with pytest.raises(TypeError, match="at least one reward family"):
        choose_reward("m2r", RewardKind.ANSWER)


def test_registration_needs_a_kind_a_family_name_and_a_free_name():
    family = RewardFamily("toy")

    @family.register("toy_one", RewardKind.EPISODE)
    def one(solver, checker):
        return 1

    assert family["toy_one"].fn is one and family.names(RewardKind.EPISODE) == ["toy_one"]
    assert family.register("toy_one", RewardKind.EPISODE)(one) is one  # the same function again: a no-op
    with pytest.raises(ValueError, match="already registered"):
        family.register("toy_one", RewardKind.EPISODE)(lambda solver, checker: 2)
    with pytest.raises(ValueError, match="must be named 'toy' or start with 'toy_'"):
        family.register("other_one", RewardKind.EPISODE)
    with pytest.raises(TypeError, match="kind must be a RewardKind"):
        family.register("toy_two", "episode")  # type: ignore[arg-type]


def test_importing_the_package_or_one_family_loads_no_other_family():
    """What a stage's import closure promises: ``factrl.rewards`` loads no family, and a family loads
    only the families it builds on (maporl's reasoning reward wraps haris's)."""
    code = ("import sys, importlib; importlib.import_module(sys.argv[1]); "
            "print(sorted(m for m in sys.modules if m.startswith('factrl.rewards.')))")
    expected = {
        "factrl.rewards": [],
        "factrl.rewards.haris": ["factrl.rewards.haris", "factrl.rewards.registry"],
        "factrl.rewards.m2r": ["factrl.rewards.m2r", "factrl.rewards.registry"],
        "factrl.rewards.march": ["factrl.rewards.march", "factrl.rewards.registry"],
        "factrl.rewards.maporl": ["factrl.rewards.haris", "factrl.rewards.maporl", "factrl.rewards.registry"],
    }
    for module, loaded in expected.items():
        out = subprocess.run([sys.executable, "-c", code, module], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == str(loaded), module
