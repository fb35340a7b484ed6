"""MAPoRL's verifier-shaped rewards (appendix F) on a crafted [turns, agents] score matrix."""

from __future__ import annotations

import numpy as np
import pytest

from factrl.rewards.maporl import (
    PENALTY,
    cumulative_reward,
    immediate_reward,
    influence_aware_reward,
    penalized_score,
)

V = [[0.2, 0.4], [0.6, 0.8], [1.0, 0.0]]  # 3 turns, 2 agents


def test_immediate_is_the_score():
    np.testing.assert_allclose(immediate_reward(V), V)


def test_cumulative_gamma_one_is_the_mean_of_remaining_turns():
    r = cumulative_reward(V)
    np.testing.assert_allclose(r, [[0.6, 0.4], [0.8, 0.4], [1.0, 0.0]])


def test_cumulative_discounts_later_turns():
    r = cumulative_reward(V, gamma=0.5)
    assert r[0, 0] == pytest.approx((0.2 + 0.5 * 0.6 + 0.25 * 1.0) / 1.75)


def test_influence_aware_uses_all_agents_later():
    r = influence_aware_reward(V)
    # turn 0, agent 0: own 0.2 + team means 0.7 (turn 1) and 0.5 (turn 2), over 3 turns
    assert r[0, 0] == pytest.approx((0.2 + 0.7 + 0.5) / 3)
    assert r[0, 1] == pytest.approx((0.4 + 0.7 + 0.5) / 3)
    assert r[1, 0] == pytest.approx((0.6 + 0.5) / 2)
    np.testing.assert_allclose(r[2], V[2])  # last turn: nothing after it


def test_bad_shape_is_rejected():
    with pytest.raises(ValueError, match="turns, agents"):
        cumulative_reward([0.1, 0.2])


def test_reward_hacking_penalties():
    body = "We add the two numbers step by step and check the sum carefully. " * 2
    assert penalized_score(0.7, body + "So the answer is \\boxed{42}.", min_tokens=10) == 0.7
    assert penalized_score(0.7, body + "So the answer is 42.", min_tokens=10) == PENALTY  # no box
    assert penalized_score(0.7, body + "\\boxed{42} and more words", min_tokens=10) == PENALTY  # after box
    assert penalized_score(0.7, "\\boxed{42}") == PENALTY  # shorter than 50 tokens
    loop = body + "the sum is " * 5 + "\\boxed{42}"
    assert penalized_score(0.7, loop, min_tokens=10) == PENALTY  # phrase repeated more than three times
    numbers = body + "1 2 1 2 1 2 1 2 1 2 \\boxed{42}"
    assert penalized_score(0.7, numbers, min_tokens=10) == 0.7  # repeated numbers are allowed
