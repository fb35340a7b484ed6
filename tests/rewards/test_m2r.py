"""M2R's answer reward (eq. 5-6) on crafted answers."""

from __future__ import annotations

import pytest

from factrl.rewards.m2r import ALPHA, BETA, extract_boxed, m2r_reward
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


def test_extract_boxed_balances_braces():
    assert extract_boxed(r"a \boxed{180.0} b \boxed{\text{x}} c \boxed{open") == ["180.0", r"\text{x}"]
    assert extract_boxed("none") == []
