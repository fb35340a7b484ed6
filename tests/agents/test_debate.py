"""SC-MAKS debate: generation phase, alternating rounds, peers read once per round, format failures
recorded, the summarizer on overflow; scripted chat-only members (and SmolLM2 once)."""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pytest

from factrl.agents import debate
from factrl.data.schemas import DEBATE_TURNS, validate
from factrl.llm.cache import CachedLLM, DiskCache
from factrl.llm.counting import CountingLLM
from factrl.recipes.scmaks_params import DebateParams
from tests.debate_fakes import GARBLE, DebateFake, by_label

PARAMS = DebateParams(rounds=2, top_k=2, evidence_k=2, max_new_tokens=32, debate_max_tokens=64,
                      max_context_tokens=4096, answer_chars=200)


@pytest.fixture
def claims(demo_world):
    rows = demo_world[0][:3]
    return [{"id": r["id"], "claim": r["claim"]} for r in rows], {r["claim"]: r["label"] for r in rows}


def members(labels, garble_member: bool = False):
    right, wrong = DebateFake(by_label(labels), "right"), DebateFake(by_label(labels, wrong=True), "wrong", peer="Ada")

    def follower(claim, kind):  # wrong at first, then follows the passages (right) in the debate
        return by_label(labels, wrong=kind == "open")(claim, kind)

    third = DebateFake((lambda c, k: None) if garble_member else follower, "third")
    return [debate.Member("Ada", "haris", right, "right"), debate.Member("Ben", "single_agent", wrong, "wrong"),
            debate.Member("Cyd", "rag", third, "third")]


def test_role_schedule_alternates_and_ablations_change_only_roles():
    assert debate.role_schedule(3, "cooperative") == ("cooperative", "adversarial", "cooperative")
    assert debate.role_schedule(2, "adversarial") == ("adversarial", "cooperative")
    assert debate.role_schedule(3, "cooperative", ["no_adversary"]) == ("cooperative",) * 3
    assert debate.role_schedule(2, "cooperative", ["no_coop"]) == ("adversarial",) * 2
    with pytest.raises(ValueError, match="no debate role"):
        debate.role_schedule(2, "cooperative", ["no_adversary", "no_coop"])


def test_rounds_read_every_peer_once_and_revise(claims, demo_retriever):
    items, labels = claims
    pool = members(labels)
    run = debate.Debate(pool, demo_retriever, PARAMS, debate.role_schedule(2, "cooperative"))
    states = run.run(items)
    for m in pool:  # one batched call per member and phase, holding every claim
        assert [size for _, size in m.llm.batches] == [3, 3, 3]
        assert [kind for kind, _ in m.llm.batches[1:]] == ["cooperative", "adversarial"]
    for s in states:
        assert [r.phase for r in s.rounds] == ["generate", "cooperative", "adversarial"]
        label = labels[s.claim]
        # Cyd opened wrong and revised after reading the passages; Ben stayed wrong
        assert s.rounds[0].answers["Cyd"].stance != label and s.rounds[-1].answers["Cyd"].stance == label
        assert s.rounds[-1].answers["Ben"].stance != label
        turn = s.rounds[1].answers["Ada"]
        assert turn.format_valid and turn.addressed == ["Ben"] and turn.cited == s.evidence.ids[:1]
    # a round-2 prompt shows each earlier round with every member's answer once, the reader's marked
    prompt = json.loads(pool[0].llm.seen[-1])[-1]["content"]
    opening, latest = prompt.split("Opening answers:")[1].split("Round 1 (cooperative):")
    for part in (opening, latest):
        assert part.count("- Ada (you):") == part.count("- Ben:") == part.count("- Cyd:") == 1
    assert "You are Ada." in latest
    rows = debate.transcript_rows(states, pool, lambda cid: {"split": "eval", "label": None, "num_hops": 2})
    assert len(rows) == 3 * 3 * 3 and {r["phase"] for r in rows} == {"generate", "cooperative", "adversarial"}


def test_malformed_output_is_a_recorded_format_failure(claims, demo_retriever):
    items, labels = claims
    pool = members(labels, garble_member=True)
    states = debate.Debate(pool, demo_retriever, PARAMS, ("adversarial",)).run(items)
    for s in states:
        opening, turn = s.rounds[0].answers["Cyd"], s.rounds[1].answers["Cyd"]
        assert not opening.format_valid and opening.verdict is None and opening.error
        assert not turn.format_valid and turn.verdict is None and turn.error == "text outside tags"
        assert GARBLE in turn.text
        # the others still debate, and read Cyd's failure as "no decision"
        assert s.rounds[1].answers["Ada"].format_valid


def test_an_empty_reply_is_a_format_failure_and_the_transcripts_stay_valid(claims, demo_retriever):
    """A member that writes nothing (seen with SmolLM2 on Climate-FEVER) is a recorded format failure;
    its transcript row has no text (null) instead of stopping the stage at the schema's empty-text check."""
    items, labels = claims
    pool = members(labels)
    opens_then_silent = lambda c, k: by_label(labels)(c, k) if k == "open" else ""  # noqa: E731
    pool[2] = debate.Member("Cyd", "rag", DebateFake(opens_then_silent, "third"), "third")
    states = debate.Debate(pool, demo_retriever, PARAMS, ("cooperative",)).run(items)
    rows = debate.transcript_rows(states, pool,
                                  lambda cid: {"split": "eval", "label": "SUPPORTS", "num_hops": 2})
    table = validate(pa.Table.from_pylist(rows, schema=DEBATE_TURNS), DEBATE_TURNS, "transcripts")
    empty = [r for r in table.to_pylist() if r["member"] == "Cyd" and r["phase"] == "cooperative"]
    assert len(empty) == 3 and all(r["text"] is None and not r["format_valid"] and r["error"] for r in empty)
    # no verdict of its own; the stance is the opening one it kept
    assert all(r["verdict"] is None and r["stance"] in ("SUPPORTS", "REFUTES") for r in empty)


def test_malformed_turn_keeps_the_previous_stance(claims, demo_retriever):
    items, labels = claims

    def opens_then_garbles(claim, kind):  # in the debate: the opposite verdict, outside the format
        right = by_label(labels)(claim, kind)
        return right if kind == "open" else "loose:" + {"Support": "Refute", "Refute": "Support"}[right]

    pool = members(labels)
    pool[2] = debate.Member("Cyd", "rag", DebateFake(opens_then_garbles, "third"), "third")
    states = debate.Debate(pool, demo_retriever, PARAMS, ("cooperative",)).run(items)
    for s in states:
        turn = s.rounds[1].answers["Cyd"]
        assert not turn.format_valid and turn.verdict is None and turn.error == "text outside tags"
        assert turn.stance == s.rounds[0].answers["Cyd"].stance == ("SUPPORTS" if labels[s.claim] == "SUPPORTS"
                                                                    else "REFUTES")


def test_summarizer_compresses_only_when_the_context_would_overflow(claims, demo_retriever):
    items, labels = claims
    roomy = debate.Debate(members(labels), demo_retriever, PARAMS, ("cooperative", "adversarial")).run(items)
    assert all(not s.summaries for s in roomy)
    # a prompt budget that round 1's prompts fit and round 2's full history does not
    r1 = max(a.prompt_tokens for s in roomy for a in s.rounds[1].answers.values())
    r2 = min(a.prompt_tokens for s in roomy for a in s.rounds[2].answers.values())
    assert r1 < r2
    budget = (r1 + r2) // 2
    tight = dataclasses.replace(PARAMS, max_context_tokens=PARAMS.debate_max_tokens + budget)
    pool = members(labels)
    states = debate.Debate(pool, demo_retriever, tight, ("cooperative", "adversarial")).run(items)
    for s in states:
        assert [index for index, _ in s.summaries] == [0]  # only the oldest round, only in round 2
        assert s.rounds[0].summary is not None and s.rounds[1].summary is None
        assert all(a.prompt_tokens <= budget for a in s.rounds[2].answers.values())
        assert all(a.prompt_tokens > budget for a in [a for r in roomy for a in r.rounds[2].answers.values()])
    with_llm = dataclasses.replace(tight, summarizer="llm")
    pool = members(labels)
    states = debate.Debate(pool, demo_retriever, with_llm, ("cooperative", "adversarial")).run(items)
    assert ("summary", 3) in pool[0].llm.batches  # one batched summarizer call for the three claims
    assert all(s.rounds[0].summary == "Everyone argued; see [P1]." for s in states)


def test_phases_resume_from_their_checkpoints(claims, demo_retriever, tmp_path):
    items, labels = claims
    first = members(labels)
    debate.Debate(first, demo_retriever, PARAMS, ("cooperative", "adversarial")).run(items, tmp_path)
    again = members(labels)
    states = debate.Debate(again, demo_retriever, PARAMS, ("cooperative", "adversarial")).run(items, tmp_path)
    assert all(m.llm.seen == [] for m in again)  # every phase read back
    assert [r.phase for r in states[0].rounds] == ["generate", "cooperative", "adversarial"]


@pytest.mark.slow  # ~1 min on a quiet 2-core CPU (5 min measured under load 12)
def test_debate_with_smollm2_through_cache_and_counter(local_llm, demo_world, demo_retriever, tmp_path):
    """The real engine behind the stage's wrappers: token-level turns (the <think> prefix), parsed."""
    llm = CachedLLM(CountingLLM(local_llm), DiskCache(tmp_path / "c.sqlite"))
    pool = [debate.Member("Ada", "rag", llm, "smollm2-135m"), debate.Member("Ben", "single_agent", llm, "smollm2-135m")]
    params = dataclasses.replace(PARAMS, max_new_tokens=16, debate_max_tokens=24, rounds=1)
    items = [{"id": r["id"], "claim": r["claim"]} for r in demo_world[0][:2]]
    states = debate.Debate(pool, demo_retriever, params, ("adversarial",), calls=lambda: llm.inner.calls).run(items)
    rows = debate.transcript_rows(states, pool, lambda cid: {"split": "eval", "label": None, "num_hops": 2})
    turns = [r for r in rows if r["phase"] == "adversarial"]
    assert len(turns) == 4 and all(r["text"] is not None and r["prompt_tokens"] > 100 for r in turns)
    assert all(r["format_valid"] == (r["error"] is None) for r in rows)
    calls = llm.inner.calls
    assert calls > 0
    debate.Debate(pool, demo_retriever, params, ("adversarial",), calls=lambda: llm.inner.calls).run(items)
    assert llm.inner.calls == calls  # a rerun is served by the disk cache
