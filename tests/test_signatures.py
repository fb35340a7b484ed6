"""Typed calls: parsers accept good outputs and reject bad ones, retries, failures, judges."""

import pytest

from factrl.llm.base import Completion, SamplingParams
from factrl.llm.cache import CachedLLM, DiskCache
from factrl.signatures import (
    RETRY_TEMPERATURE,
    Judge,
    LLMJudge,
    ParseError,
    PseudoAnswer,
    RuleJudge,
    Verdict,
    containment,
    make_judge,
    parse_pseudo_answer,
    parse_useful,
    parse_verdict,
    pseudo_answers,
    token_f1,
    verify_claims,
)


class ScriptedLLM:
    """Replies ``reply(last_user_message, params, attempt_of_that_prompt)``; records every batch."""

    model_name = "scripted"

    def __init__(self, reply):
        self.reply = reply
        self.batches: list[tuple[int, SamplingParams]] = []
        self.seen: dict[str, int] = {}

    def chat(self, conversations, params):
        self.batches.append((len(conversations), params))
        out = []
        for conv in conversations:
            user = conv[-1]["content"]
            attempt = self.seen.get(user, 0)
            self.seen[user] = attempt + 1
            out.append([Completion(text=self.reply(user, params, attempt))])
        return out

    def complete_tokens(self, prompts, params):
        raise NotImplementedError


def qa_item(question, claim="Bram Stoker wrote Dracula.", label="SUPPORTS"):
    return {"claim": claim, "label": label, "evidence": ["Dracula is an 1897 novel by Bram Stoker."],
            "question": question}


# ---- parsers --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Rationale: The evidence names him.\nAnswer: Bram Stoker", ("The evidence names him.", "Bram Stoker")),
        ("Rationale: first line\nsecond line\nAnswer: 1897\nExtra chatter", ("first line second line", "1897")),
        ("**Answer:** None", (None, None)),
        ("Rationale: not stated.\nAnswer: none.", ("not stated.", None)),
        ("Answer: The answer is Paris", (None, "Paris")),
        ("- answer: Ireland", (None, "Ireland")),
    ],
)
def test_parse_pseudo_answer_good(text, expected):
    assert parse_pseudo_answer(text) == expected


@pytest.mark.parametrize(
    "text", ["", "Bram Stoker", "Rationale: he wrote it.", "Answer:", "Answer: **", "Answer: " + "word " * 60]
)
def test_parse_pseudo_answer_bad(text):
    with pytest.raises(ParseError):
        parse_pseudo_answer(text)


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("Verdict: Support", "SUPPORTS"),
        ("**Verdict**: Refuted.", "REFUTES"),
        ("Refute", "REFUTES"),
        ("Veracity: 'Support'", "SUPPORTS"),
        ("Verdict: Support (the context states it)", "SUPPORTS"),
    ],
)
def test_parse_verdict_good(text, label):
    assert parse_verdict(text) == label


@pytest.mark.parametrize(
    "text", ["", "Verdict: Maybe", "Verdict: Support or Refute", "I think the claim is true.", "Verdict:"]
)
def test_parse_verdict_bad(text):
    with pytest.raises(ParseError):
        parse_verdict(text)


def test_parse_useful():
    assert parse_useful("Useful: yes") is True
    assert parse_useful("**Useful:** No.") is False
    assert parse_useful("is_useful: yes") is True
    assert parse_useful("yes") is True
    for bad in ["", "Useful: perhaps", "The information is useful.", "Useful: yes and no"]:
        with pytest.raises(ParseError):
            parse_useful(bad)


# ---- retries and failures --------------------------------------------------------------------
def test_pseudo_answers_batches_retries_and_records_failures():
    def reply(user, params, attempt):
        if "always" in user:
            return f"I cannot say ({attempt})"
        if "late" in user and attempt == 0:
            return "Bram Stoker"  # no Answer: line
        return "Rationale: the evidence says so.\nAnswer: Bram Stoker"

    llm = ScriptedLLM(reply)
    items = [qa_item("Who wrote it first?"), qa_item("Who wrote it late?"), qa_item("Who wrote it always?")]
    out = pseudo_answers(llm, items, retries=2)
    assert all(isinstance(r, PseudoAnswer) for r in out)
    assert out[0] == PseudoAnswer("the evidence says so.", "Bram Stoker", True, None, out[0].raw)
    assert out[1].ok and out[1].answer == "Bram Stoker"
    assert not out[2].ok and out[2].answer is None and out[2].rationale is None
    assert "3 attempt(s)" in out[2].error and "Answer:" in out[2].error
    assert out[2].raw == "I cannot say (2)"  # the last reply is kept
    # one batched call per attempt, each with only the still-malformed items
    assert [n for n, _ in llm.batches] == [3, 2, 1]
    first, second, third = (p for _, p in llm.batches)
    assert first.temperature == 0.0 and first.seed == 0
    assert (second.temperature, second.seed) == (RETRY_TEMPERATURE, 1)
    assert third.seed == 2


def test_zero_retries_and_bad_params():
    llm = ScriptedLLM(lambda *_: "nonsense")
    out = verify_claims(llm, [{"claim": "c", "context": "x"}], retries=0)
    assert out == [Verdict(None, False, out[0].error, "nonsense")] and len(llm.batches) == 1
    with pytest.raises(ValueError, match="n=2"):
        verify_claims(llm, [{"claim": "c", "context": "x"}], params=SamplingParams(n=2))


def test_retry_is_not_replayed_from_cache(tmp_path):
    """A greedy malformed reply gets cached; the retry must use a new key, and a rerun is free."""

    def reply(user, params, attempt):
        return "Verdict: Support" if params.temperature > 0 else "I am not sure."

    inner = ScriptedLLM(reply)
    llm = CachedLLM(inner, DiskCache(tmp_path / "c.sqlite"))
    items = [{"claim": "Dracula is a novel.", "context": ["Dracula is an 1897 novel.", "By Bram Stoker."]}]
    assert verify_claims(llm, items)[0].label == "SUPPORTS"
    assert len(inner.batches) == 2
    assert verify_claims(llm, items)[0].label == "SUPPORTS"
    assert len(inner.batches) == 2  # both attempts served from the cache


def test_input_errors_name_item_and_field():
    llm = ScriptedLLM(lambda *_: "Answer: x")
    with pytest.raises(ValueError, match="item 1: field 'claim'"):
        verify_claims(llm, [{"claim": "a", "context": "b"}, {"context": "b"}])
    with pytest.raises(ValueError, match="item 0: field 'label'"):
        pseudo_answers(llm, [qa_item("q?", label="MAYBE")])
    with pytest.raises(ValueError, match="item 0: field 'evidence'"):
        pseudo_answers(llm, [{**qa_item("q?"), "evidence": []}])
    assert llm.batches == []  # nothing is sent before every item is valid


# ---- judges ----------------------------------------------------------------------------------
def test_llm_judge_counts_failures_and_skips_empty():
    def reply(user, params, attempt):
        if "garbled" in user:
            return "hmm"
        return "Useful: yes" if "Stoker" in user.split("Gathered information:")[1] else "Useful: no"

    llm = ScriptedLLM(reply)
    judge = make_judge("llm", llm, retries=1)
    assert isinstance(judge, Judge) and isinstance(judge, LLMJudge) and judge.name == "llm"
    q, a = "Who wrote Dracula?", "Bram Stoker"
    items = [
        {"question": q, "answer": a, "gathered": "It was written by Bram Stoker."},
        {"question": q, "answer": a, "gathered": "Paris is in France."},
        {"question": q, "answer": a, "gathered": ""},
        {"question": q, "answer": a, "gathered": "garbled"},
    ]
    assert judge.judge(items) == [True, False, False, False]
    assert [n for n, _ in llm.batches] == [3, 1]  # the empty report is never sent; one retry
    assert judge.failures == 1 and judge.calls == 3
    assert not judge.last[3].ok and "2 attempt(s)" in judge.last[3].error
    assert judge.last[2].ok and judge.last[2].useful is False


def test_rule_judge_known_pairs():
    judge = make_judge("rule")
    assert isinstance(judge, RuleJudge) and isinstance(judge, Judge) and judge.name == "rule"
    q = "Who wrote Dracula?"
    pairs = [
        ("Bram Stoker", "Dracula is an 1897 novel by the Irish author Bram Stoker.", True),
        ("The United States", "It happened in united states, in 1990.", True),  # case, article
        ("Bram Stoker", "The author's surname was Stoker.", False),  # half the answer
        ("Paris", "Parisian cafes are famous.", False),  # no whole-word match
        ("Bram Stoker", "", False),
        ("1897", "Published in 1897!", True),
    ]
    items = [{"question": q, "answer": a, "gathered": g} for a, g, _ in pairs]
    assert judge.judge(items) == [want for _, _, want in pairs]
    assert make_judge("rule", threshold=0.5).judge(items[2:3]) == [True]
    assert token_f1("the cat sat", "Cat sat down.") == pytest.approx(0.8)
    assert containment("Stoker wrote it", "Bram Stoker") == pytest.approx(0.5)
    assert token_f1("", "x") == 0.0
    with pytest.raises(ValueError, match="unknown judge"):
        make_judge("oracle")
    with pytest.raises(ValueError, match="needs an llm"):
        make_judge("llm")
    with pytest.raises(ValueError, match="item 0: field 'answer'"):
        judge.judge([{"question": q, "answer": None, "gathered": "x"}])


# ---- through the real local model ----------------------------------------------------------------
def _well_typed(result, value_ok):
    if result.ok:
        assert result.error is None and value_ok(result)
    else:
        assert isinstance(result.error, str) and "attempt" in result.error
    assert isinstance(result.raw, str)


@pytest.mark.slow  # minutes of real SmolLM2 decoding on 2 cores
def test_pseudo_answers_smollm2(local_llm):
    out = pseudo_answers(local_llm, [qa_item("Who wrote Dracula?")], retries=1,
                         params=SamplingParams(max_tokens=40, seed=0))
    assert len(out) == 1
    _well_typed(out[0], lambda r: r.answer is None or (isinstance(r.answer, str) and r.answer.strip()))
    assert out[0].ok, out[0]  # the one-example prompt gets SmolLM2 into the format


def test_verify_claims_smollm2(local_llm):
    items = [
        {"claim": "Bram Stoker wrote Dracula.", "context": "Dracula is an 1897 novel by Bram Stoker."},
        {"claim": "Paris is in Italy.", "context": "Paris is the capital of France."},
    ]
    out = verify_claims(local_llm, items, retries=1, params=SamplingParams(max_tokens=12, seed=0))
    for r in out:
        _well_typed(r, lambda r: r.label in ("SUPPORTS", "REFUTES"))
    assert any(r.ok for r in out)


@pytest.mark.slow  # minutes of real SmolLM2 decoding on 2 cores
def test_llm_judge_smollm2(local_llm):
    judge = LLMJudge(local_llm, retries=1, params=SamplingParams(max_tokens=12, seed=0))
    items = [
        {"question": "Who wrote Dracula?", "answer": "Bram Stoker", "gathered": "Bram Stoker wrote Dracula."},
        {"question": "Who wrote Dracula?", "answer": "Bram Stoker", "gathered": "Paris is in France."},
    ]
    verdicts = judge.judge(items)
    assert len(verdicts) == 2 and all(isinstance(v, bool) for v in verdicts)
    for r in judge.last:
        _well_typed(r, lambda r: isinstance(r.useful, bool))
    assert judge.failures == sum(not r.ok for r in judge.last)
