"""HARIS rewards (eq. 1 and 3) on crafted responses: 1 / 0.1 / 0 exactly as the paper defines them."""

from __future__ import annotations

import pytest

from factrl.rewards.haris import REWARDS, reasoning_reward, search_rewards
from factrl.rewards.registry import RewardKind

REASONING_OK = (
    "<think>I need the director's birthplace.</think>"
    "<question>Where was Christopher Nolan born?</question>"
    "<result>Christopher Nolan was born in London.</result>"
    "<think>London matches the claim.</think>"
    "<verification>The evidence agrees. \\boxed{{{verdict}}}</verification>"
)
SEARCH_OK = (
    "<think>Search the birthplace.</think><search>Christopher Nolan birthplace</search>"
    "<result>Nolan was born in Westminster, London.</result><report>{report}</report>"
)


class FakeJudge:
    """Says "useful" when the gold answer appears in the report; records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[list[dict]] = []

    def judge(self, items):
        self.calls.append(list(items))
        return [it["answer"].lower() in it["gathered"].lower() for it in items]


@pytest.mark.parametrize(
    ("verdict", "label", "expected"),
    [
        ("Support", "SUPPORTS", 1.0),
        ("Refute", "REFUTES", 1.0),
        ("Refute", "SUPPORTS", 0.1),
        ("Support", "REFUTES", 0.1),
        ("Support", "NOT ENOUGH INFO", 0.1),  # binary task: not supported counts as refuted
        ("Refute", "NOT ENOUGH INFO", 1.0),
    ],
)
def test_reasoning_reward_valid_format(verdict, label, expected):
    r = reasoning_reward(REASONING_OK.format(verdict=verdict), label)
    assert r.format_valid
    assert r.score == expected
    assert r.parts["correct"] == (1.0 if expected == 1.0 else 0.0)


@pytest.mark.parametrize(
    "response",
    [
        "The claim is true. \\boxed{Support}",  # no tags at all
        "<think>ok</think><verification>I am not sure.</verification>",  # no boxed verdict
        "<think>ok</think><question>Who?</question><verification>\\boxed{Support}</verification>",  # no result
        "<think>ok</think><verification>\\boxed{Support}",  # unclosed
        "<think>ok</think><verification>\\boxed{Support}</verification><think>more</think>",  # not last
        "",
    ],
)
def test_reasoning_reward_invalid_format_is_zero_even_if_verdict_right(response):
    r = reasoning_reward(response, "SUPPORTS")
    assert (r.score, r.format_valid) == (0.0, False)


GUESS = "<think>The claim sounds right.</think><verification>\\boxed{{{verdict}}}</verification>"


@pytest.mark.parametrize(
    ("response", "num_hops", "expected"),
    [
        (GUESS.format(verdict="Support"), 2, (0.0, False)),  # right verdict, nothing asked: invalid
        (GUESS.format(verdict="Refute"), 4, (0.0, False)),  # wrong verdict, nothing asked: 0, not 0.1
        (REASONING_OK.format(verdict="Support"), 2, (1.0, True)),  # asked, then decided
        (REASONING_OK.format(verdict="Refute"), 3, (0.1, True)),
        (GUESS.format(verdict="Support"), 1, (1.0, True)),  # a one-hop claim may be decided directly
        (GUESS.format(verdict="Support"), None, (1.0, True)),  # hop count unknown: no rule
        ("<think>x</think><question>Who?</question><verification>\\boxed{Support}</verification>", 2,
         (0.0, False)),  # a question without its result stays invalid
    ],
)
def test_ask_before_you_decide(response, num_hops, expected):
    r = reasoning_reward(response, "SUPPORTS", num_hops=num_hops, require_question=True)
    assert (r.score, r.format_valid) == expected
    assert r.parts["format"] == float(expected[1]) and r.parts["correct"] == float(expected[0] == 1.0)
    # off (the default): only the paper's format rules
    off = reasoning_reward(response, "SUPPORTS", num_hops=num_hops)
    assert off.score == reasoning_reward(response, "SUPPORTS").score
    if "question" not in response:
        assert off.format_valid


TWO_QUESTIONS = REASONING_OK.replace(
    "<think>London", "<question>Is London in England?</question><result>Yes.</result><think>London")


@pytest.mark.parametrize(
    ("response", "num_hops", "valid"),
    [
        (REASONING_OK, 2, True),  # one bridge, one question
        (REASONING_OK, 3, False),  # two bridges, one question: `true` would accept it
        (TWO_QUESTIONS, 3, True),
        (TWO_QUESTIONS, 4, False),
        (GUESS, 1, True),
        (GUESS, None, True),
    ],
)
def test_ask_one_question_per_bridge(response, num_hops, valid):
    r = reasoning_reward(response.format(verdict="Support"), "SUPPORTS", num_hops=num_hops,
                         require_question="per_hop")
    assert (r.format_valid, r.score) == (valid, 1.0 if valid else 0.0)
    if num_hops == 3 and response is REASONING_OK:  # what tells per_hop from true
        assert reasoning_reward(response.format(verdict="Support"), "SUPPORTS", num_hops=3,
                                require_question=True).format_valid


def test_reasoning_reward_rejects_unknown_label():
    with pytest.raises(ValueError, match="unknown gold label"):
        reasoning_reward(REASONING_OK.format(verdict="Support"), "MAYBE")


def test_search_rewards_one_zero_point_one_zero():
    judge = FakeJudge()
    responses = [
        SEARCH_OK.format(report="Christopher Nolan was born in London, England."),  # useful -> 1
        SEARCH_OK.format(report="Nolan directed Inception."),  # valid, not useful -> 0.1
        "Christopher Nolan was born in London.",  # mentions the answer but no tags -> 0
        "<search>Nolan</search><report>London</report>",  # search without result -> 0
    ]
    out = search_rewards(responses, ["Where was Christopher Nolan born?"] * 4, ["London"] * 4, judge)
    assert [r.score for r in out] == [1.0, 0.1, 0.0, 0.0]
    assert [r.format_valid for r in out] == [True, True, False, False]
    assert [r.parts["useful"] for r in out] == [1.0, 0.0, 0.0, 0.0]
    # one batched judge call, on the two well-formed reports only, with the contract's keys
    assert len(judge.calls) == 1 and len(judge.calls[0]) == 2
    assert judge.calls[0][0] == {
        "question": "Where was Christopher Nolan born?",
        "answer": "London",
        "gathered": "Christopher Nolan was born in London, England.",
    }


def test_search_rewards_no_valid_response_skips_the_judge():
    judge = FakeJudge()
    out = search_rewards(["no tags here"], ["q"], ["a"], judge)
    assert out[0].score == 0.0 and judge.calls == []


def test_search_rewards_checks_batch_and_judge_sizes():
    with pytest.raises(ValueError, match="batch sizes differ"):
        search_rewards(["x", "y"], ["q"], ["a", "b"], FakeJudge())

    class ShortJudge:
        def judge(self, items):
            return []

    with pytest.raises(ValueError, match="judge returned 0 verdicts for 1 items"):
        search_rewards([SEARCH_OK.format(report="r")], ["q"], ["a"], ShortJudge())


def test_registered_by_name_with_their_kinds():
    assert REWARDS["haris_reasoning"].fn is reasoning_reward
    assert REWARDS["haris_reasoning"].kind is RewardKind.CLAIM_VERDICT
    assert REWARDS["haris_search"].fn is search_rewards
    assert REWARDS["haris_search"].kind is RewardKind.SEARCH_REPORT


def test_hop_credit_ranks_rollouts_that_got_further_along_the_chain():
    from factrl.agents.rollout import RESULT_CLOSE, RESULT_OPEN
    from factrl.rewards.haris import hops_found, reasoning_reward, with_hop_credit

    def response(*reports: str, verdict: str = "Refute") -> str:
        asked = "".join(f"<question>Q{i}?</question>{RESULT_OPEN}{r}{RESULT_CLOSE}" for i, r in enumerate(reports))
        return f"<think>x</think>{asked}<verification>\\boxed{{{verdict}}}</verification>"

    chain = ["Rili Sessions", "Kana Bevox", "Vuvos"]
    one = response("The soundtrack is Rili Sessions.")
    three = response("The soundtrack is Rili Sessions.", "It was recorded by Kana Bevox.", "Born in vuvos.")
    assert hops_found(one, chain) == pytest.approx(1 / 3) and hops_found(three, chain) == 1.0
    assert hops_found("<think>Rili Sessions</think>", chain) == 0  # its own words are no report
    base = reasoning_reward(three, "SUPPORTS")  # wrong verdict, valid format: 0.1
    shaped = with_hop_credit(base, three, chain, 0.2)
    assert shaped.score == pytest.approx(0.1 + 0.2) and shaped.parts["hops_found"] == 1.0
    assert with_hop_credit(base, three, chain, 0.0) is base  # off by default
    invalid = reasoning_reward("<question>Q?</question>", "SUPPORTS")
    assert with_hop_credit(invalid, one, chain, 0.2).score == 0.0  # a malformed response earns nothing
