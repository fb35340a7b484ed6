"""One engine row: when it stops (EOS, a stop string, its budget), and the greedy memo's sharing and bound."""

from dataclasses import replace

from factrl.llm.base import SamplingParams
from factrl.llm.engine_rows import GenerationRequest, GreedyMemo, stop_window


def _row(tok, **params) -> GenerationRequest:
    return GenerationRequest(tok.encode("Q: what?"), SamplingParams(**{"max_tokens": 16, **params}), None)


def _feed(row: GenerationRequest, tok, text: str) -> bool:
    """Advance ``row`` token by token through ``text``; whether it finished (and where it stopped)."""
    for t in tok.encode(text):
        if row.advance(t, -0.5, None, eos_ids={tok.eos_token_id}, tokenizer=tok):
            return True
    return False


def test_a_row_stops_at_eos_at_a_stop_string_or_at_its_budget(tok):
    eos = _row(tok)
    assert eos.advance(tok.eos_token_id, -0.1, None, eos_ids={tok.eos_token_id}, tokenizer=tok)
    assert (eos.finish_reason, eos.ended_by_eos, eos.out) == ("stop", True, [tok.eos_token_id])  # EOS kept

    ignored = _row(tok, ignore_eos=True)
    assert not ignored.advance(tok.eos_token_id, -0.1, None, eos_ids={tok.eos_token_id},
                               tokenizer=tok)

    stop = _row(tok, stop=("</search>",))
    assert _feed(stop, tok, "<search>who founded Hatur Studios?</search> and more")
    assert tok.decode(stop.out).endswith("</search>") and stop.finish_reason == "stop"
    assert stop.logprobs == [-0.5] * len(stop.out)

    budget = _row(tok, max_tokens=3)
    assert _feed(budget, tok, "one two three four five") and len(budget.out) == 3
    assert budget.finish_reason == "length"
    # a stop string spans at most one token per byte, plus a token begun mid-character
    assert stop_window(("</search>", "x")) == len("</search>") + 2


def test_a_finished_row_answers_its_followers_and_later_ones(tok):
    leader = _row(tok)
    early = _row(tok)
    leader.answer(early)  # still decoding: answered when it finishes
    assert not early.done
    _feed(leader, tok, "SUPPORTS")
    assert leader.finish(tok) == [early] and leader.followers == []
    late = _row(tok)
    leader.answer(late)  # done: answered at once
    assert early.completion == leader.completion == late.completion
    assert early.completion is not leader.completion  # copies: a caller may not change another's


def test_the_greedy_memo_shares_identical_requests_only_and_stays_bounded(tok):
    memo = GreedyMemo(max_entries=2)
    first = _row(tok)
    assert memo.leader(first) is first
    assert memo.leader(_row(tok)) is first  # same prompt and settings
    other_settings = GenerationRequest(first.prompt, replace(first.params, max_tokens=8), None)
    assert memo.leader(other_settings) is other_settings
    third = GenerationRequest([1, 2, 3], first.params, None)
    assert memo.leader(third) is third and len(memo) == 2  # the oldest (first's key) left
    assert memo.leader(_row(tok)) is not first
    memo.clear()
    assert len(memo) == 0
