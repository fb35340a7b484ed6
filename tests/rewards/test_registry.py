"""The reward registry: names resolve to the functions, duplicates and unknown names fail clearly."""

from __future__ import annotations

import pytest

from factrl.rewards import REWARDS, get_reward, register


def test_builtin_rewards_are_registered():
    get_reward("haris_reasoning")  # loads the built-in modules
    for name in ("haris_reasoning", "haris_search", "m2r", "march_ztr", "march_err",
                 "maporl_immediate", "maporl_cumulative", "maporl_influence"):
        assert callable(REWARDS[name])


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="haris_reasoning"):
        get_reward("no_such_reward")


def test_duplicate_name_is_rejected():
    @register("test_only_reward")
    def one():
        return 1

    try:
        with pytest.raises(ValueError, match="already registered"):
            register("test_only_reward")(lambda: 2)
        assert register("test_only_reward")(one) is one  # re-registering the same function is a no-op
    finally:
        REWARDS.pop("test_only_reward")
