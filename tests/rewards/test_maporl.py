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


def test_closing_protocol_tags_after_the_box_are_not_text_after_it():
    body = "We add the two numbers step by step and check the sum carefully. " * 2
    assert penalized_score(0.7, body + "<verification>\\boxed{42}</verification>", min_tokens=10) == 0.7
    assert penalized_score(0.7, body + "<verification>\\boxed{42}</verification> ok", min_tokens=10) == PENALTY


def test_verifier_rewards_guard_each_answer_then_shape_by_name():
    from factrl.rewards.maporl import SHAPES, verifier_rewards

    long = "Each passage says the founder was born there, so the chain holds. " * 8
    ok, hacked = long + "\\boxed{Support}", long + "\\boxed{Support} Support Support"  # tokens after the box
    v = [[1.0, 1.0], [1.0, 0.0]]
    answers = [[ok, hacked], [ok, ok]]
    np.testing.assert_allclose(verifier_rewards("maporl_immediate", v, answers), [[1.0, PENALTY], [1.0, 0.0]])
    # cumulative with gamma 1: the mean of the guarded scores from each turn on
    np.testing.assert_allclose(verifier_rewards("maporl_cumulative", v, answers),
                               [[1.0, (PENALTY + 0.0) / 2], [1.0, 0.0]])
    np.testing.assert_allclose(verifier_rewards("maporl_influence", v, None), influence_aware_reward(v))
    assert set(SHAPES) == {"maporl_immediate", "maporl_cumulative", "maporl_influence"}
    with pytest.raises(ValueError, match="maporl_cumulative"):
        verifier_rewards("cumulative", v)
    with pytest.raises(ValueError, match="2 turns x 2 agents"):
        verifier_rewards("maporl_immediate", v, [[ok]])


def test_maporl_reasoning_is_selectable_by_name_and_a_guard_fires_on_a_hacked_output():
    from factrl.rewards import haris, maporl
    from factrl.rewards.registry import RewardKind, choose_reward

    fn = choose_reward("maporl_reasoning", RewardKind.CLAIM_VERDICT, haris.REWARDS, maporl.REWARDS)
    think = "<think>" + "The founder of Orlen Studios is Ilse Parrow, who was born in Tessik. " * 6 + "</think>"
    report = "<result>" + "Tessik Tessik Tessik Tessik Tessik Tessik " * 3 + "</result>"  # injected: not judged
    good = think + "<question>Who founded Orlen Studios?</question>" + report + \
        "<verification>\\boxed{Refute}</verification>"
    assert fn(good, "REFUTES").score == 1.0 and fn(good, "SUPPORTS").score == 0.0
    hacked = good.replace("</think><question>", " yes yes yes yes yes yes yes yes</think><question>")
    r = fn(hacked, "REFUTES")  # the agent repeats a token more than three times in a row
    assert r.score == PENALTY and r.parts["guarded"] == 1.0 and r.parts["correct"] == 1.0
    short = "<think>ok</think><verification>\\boxed{Refute}</verification>"
    assert fn(short, "REFUTES").score == PENALTY  # a right verdict without reasoning: too short
    with pytest.raises(KeyError, match="train.reasoning.reward"):
        choose_reward("maporl_reasonin", RewardKind.CLAIM_VERDICT, maporl.REWARDS, key="train.reasoning.reward")


def test_the_debate_selects_a_verifier_reward_by_name_and_shapes_each_members_turns():
    import dataclasses

    from factrl.config import ConfigError
    from factrl.recipes.scmaks import debate_plan, debate_verifier_rewards
    from factrl.recipes.scmaks_params import DebateParams

    with pytest.raises(ConfigError, match=r"debate.verifier_reward: unknown reward 'maporl_cumul'.*'maporl_cumulative'"):
        debate_plan(DebateParams(verifier_reward="maporl_cumul"))
    params = DebateParams(verifier_reward="maporl_cumulative", verifier_min_tokens=3)
    debate_plan(params)
    good = "<think>the passage says so</think><verification>\\boxed{Support}</verification>"
    hacked = good + " Support"  # a token after the box

    def row(rnd, member, verdict, text):
        phase = "generate" if rnd == 0 else "cooperative"
        return {"claim_id": "c1", "label": "SUPPORTS", "round": rnd, "member": member, "phase": phase, "sample": 0,
                "verdict": verdict, "text": text}

    rows = [row(0, "Ada", "SUPPORTS", good), row(0, "Ben", "REFUTES", good),
            row(1, "Ada", "SUPPORTS", hacked), row(1, "Ben", "SUPPORTS", good)]
    out = debate_verifier_rewards(rows, ["Ada", "Ben"], params)
    # Ada: turn 0 mean(1, -10) = -4.5, turn 1 -10; Ben: turn 0 mean(0, 1) = 0.5, turn 1 1
    assert out["per_member"] == {"Ada": pytest.approx((-4.5 - 10) / 2), "Ben": pytest.approx((0.5 + 1) / 2)}
    assert out["guarded_answers"] == 1 and out["answers"] == 4 and out["claims"] == 1
    immediate = debate_verifier_rewards(rows, ["Ada", "Ben"],
                                        dataclasses.replace(params, verifier_reward="maporl_immediate"))
    assert immediate["per_turn"] == [pytest.approx(0.5), pytest.approx(-4.5)]
