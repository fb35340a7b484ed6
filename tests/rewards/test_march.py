"""MARCH's zero-tolerance (eq. 7) and error-rate rewards on crafted Solver / Checker answers."""

from __future__ import annotations

import pytest

from factrl.rewards.march import claim_agreements, error_rate_reward, majority_answer, zero_tolerance_reward


def test_majority_vote_of_checker_samples():
    assert majority_answer(["89", "89%", "90"]) == "89"  # "89%" normalises to "89"
    assert majority_answer(["x", "y"]) == "x"  # tie: first seen
    assert majority_answer([]) is None


def test_every_claim_agrees_scores_one():
    r = zero_tolerance_reward(["89", "The 78"], [["89", "89", "90"], "78"])
    assert r.score == 1.0 and r.parts == {"n_claims": 2.0, "n_err": 0.0}


def test_one_mismatch_fails_the_whole_trajectory():
    solver = ["89", "78", "12", "5"]
    checker = ["89", "78", "13", "5"]
    assert zero_tolerance_reward(solver, checker).score == 0.0
    assert zero_tolerance_reward(solver, checker, penalty=True).score == -1.0
    assert zero_tolerance_reward(solver[:2], checker[:2], penalty=True).score == 0.0
    assert error_rate_reward(solver, checker).score == pytest.approx(-0.25)
    assert error_rate_reward(solver[:2], checker[:2]).score == 0.0


def test_checker_majority_decides_not_any_sample():
    # one of three samples agrees with the solver, but the consensus does not
    assert claim_agreements(["89"], [["89", "90", "90"]]) == [False]
    # empty answers never agree, even with each other
    assert claim_agreements(["the", ""], ["the", ""]) == [False, False]


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="2 solver answers but 1 checker"):
        zero_tolerance_reward(["a", "b"], ["a"])


def test_checker_votes_sum_below_zero_fails_the_claim():
    # +1 per agreeing sample, -1 per other one; a tie (sum 0) passes, a sum below 0 fails
    assert claim_agreements(["89"], [["89", "90"]]) == [True]
    assert claim_agreements(["89"], [["89", "90", "91"]]) == [False]  # majority-answer would pick "89" (first seen)
    assert claim_agreements(["89"], [["89", "89", "cannot answer", "90"]]) == [True]
    assert claim_agreements(["89"], [["cannot answer", None, "89"]]) == [False]  # unparsed samples vote -1 too
    assert claim_agreements(["89"], [[]]) == [False]  # nothing backs an unaudited claim


def test_numbers_match_whatever_their_spelling():
    assert claim_agreements(["1200", "45", "12000"], ["1,200", "$45", "twelve thousand"]) == [True, True, True]
    assert claim_agreements(["1200"], ["120"]) == [False]
    assert claim_agreements(["Paris"], ["paris."]) == [True]  # no number on either side: text match


def test_ztr_and_err_on_crafted_episodes():
    solver = ["1987", "12", "45"]
    checker = [["1987", "1987", "1987"], ["12", "13", "12"], ["cannot answer", "44", "45"]]
    assert zero_tolerance_reward(solver, checker).score == 0.0  # the third claim fails its vote
    assert zero_tolerance_reward(solver, checker, penalty=True).score == -1.0
    assert error_rate_reward(solver, checker).score == pytest.approx(-1 / 3)
    assert error_rate_reward(solver, checker).parts == {"n_claims": 3.0, "n_err": 1.0}
    assert zero_tolerance_reward(solver[:2], checker[:2]).score == 1.0
    assert zero_tolerance_reward([], []).score == 1.0 and error_rate_reward([], []).score == 0.0  # nothing claimed
    assert zero_tolerance_reward([""], [[]]).score == 0.0  # a malformed episode: one unverifiable claim
