"""M2R's answer reward (eq. 5-6) on crafted answers."""

from __future__ import annotations

import pytest

from factrl.rewards.m2r import ALPHA, BETA, REWARDS, m2r_reward
from factrl.rewards.registry import RewardKind, choose_reward
from factrl.text import token_f1


def test_token_f1_squad_style():
    assert token_f1("The Eiffel Tower!", "eiffel tower") == 1.0
    assert token_f1("the city of Paris", "Paris") == pytest.approx(0.5)  # P = 1/3, R = 1
    assert token_f1("", "Paris") == 0.0 and token_f1("Rome", "Paris") == 0.0


def test_full_reward_sums_the_three_f1_scores():
    r = m2r_reward("Paris", ["Paris"], format_valid=True, key_info=["Paris", "France"])
    assert r.parts == {"s_final": 1.0, "s_key": 1.0, "s_cons": 1.0, "r_ans": pytest.approx(1 + ALPHA + BETA),
                       "format": 1.0}
    assert r.score == pytest.approx(1 + 1 / 3 + 1 / 10)


def test_partial_overlap_without_key_info_is_the_answer_f1():
    assert m2r_reward("the city of Paris", ["Paris"], format_valid=True).score == pytest.approx(0.5)
    # the best of several gold answers counts
    assert m2r_reward("NYC", ["New York City", "NYC"], format_valid=False).score == 1.0


@pytest.mark.parametrize(("answer", "fmt", "expected"), [("Rome", True, 0.1), ("Rome", False, 0.0),
                                                         (None, True, 0.1), (None, False, 0.0)])
def test_zero_f1_falls_back_to_the_format_reward(answer, fmt, expected):
    r = m2r_reward(answer, ["Paris"], format_valid=fmt, key_info=["Paris"])
    assert r.score == expected and r.format_valid is fmt


def test_the_weights_alpha_and_beta_scale_their_scores():
    # final answer "Paris France" vs gold "Paris": F1 2/3; key info "Paris": s_key 1; s_cons F1 2/3
    r = m2r_reward("Paris France", ["Paris"], format_valid=True, key_info=["Paris"], alpha=0.5, beta=0.25)
    assert r.parts["s_final"] == pytest.approx(2 / 3) and r.parts["s_key"] == 1.0
    assert r.parts["s_cons"] == pytest.approx(2 / 3)
    assert r.score == pytest.approx(2 / 3 + 0.5 * 1.0 + 0.25 * 2 / 3)
    # the key information counts only through s_key and s_cons: a wrong final answer earns 0.1 at most
    assert m2r_reward("Rome", ["Paris"], format_valid=True, key_info=["Paris"]).score == 0.1


def test_the_m2r_reward_is_selected_by_name_as_an_answer_reward():
    assert choose_reward("m2r", RewardKind.ANSWER, REWARDS) is m2r_reward
    with pytest.raises(KeyError, match="m2r.reward"):
        choose_reward("m2r_typo", RewardKind.ANSWER, REWARDS, key="m2r.reward")
