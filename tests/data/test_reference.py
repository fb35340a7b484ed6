"""Reference trajectories of the warm start: the demo world's gold chains (the agents' own parser
reads back the right questions and verdict; bridges are named only once found; the search agent's
passages come from the real retriever) and a teacher's rollouts, rejection-sampled on the verdict."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from factrl.agents.haris import REASONING_SYSTEM, SEARCH_SYSTEM
from factrl.agents.protocol import parse_reasoning, parse_search
from factrl.agents.rollout import RESULT_CLOSE, RESULT_OPEN
from factrl.agents.tools import RetrieverTool
from factrl.data.params import WorldParams
from factrl.data.reference import check_reference, teacher_references, validate_references, world_references
from factrl.data.schemas import REFERENCES, REFERENCES_REJECTED, DataError
from factrl.llm.base import Completion, TokensUnsupported
from factrl.recipes.warmup_params import WarmupParams
from factrl.retrieval.index import Hit


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(claims, BM25 retriever) of a 400-passage world with 2-, 3- and 4-hop claims."""
    from factrl.data.world import write_world
    from factrl.retrieval.index import Retriever, build_index

    d = tmp_path_factory.mktemp("refworld")
    write_world(WorldParams(seed=5, num_passages=400, num_claims=24, hops=(2, 3, 4)), d / "p.parquet", d / "c.parquet")
    build_index(d / "p.parquet", d / "index", embedder=None)
    return pq.read_table(d / "c.parquet").to_pylist(), Retriever(d / "index", mode="bm25")


def _text(row: dict) -> str:
    return "".join(t["text"] if t["role"] == "model" else RESULT_OPEN + t["text"] + RESULT_CLOSE for t in row["turns"])


def test_world_references_parse_into_the_gold_questions_and_verdict(world):
    claims, retriever = world
    kept, rejected = world_references(claims, RetrieverTool(retriever, k=3))
    by_id = {c["id"]: c for c in claims}
    reasoning = [r for r in kept if r["agent"] == "reasoning"]
    assert len(reasoning) == len(claims) and {r["num_hops"] for r in reasoning} == {2, 3, 4}
    assert {r["label"] for r in reasoning} == {"SUPPORTS", "REFUTES"}
    for row in reasoning:
        claim = by_id[row["claim_id"]]
        parse = parse_reasoning(_text(row))
        assert parse.format_valid, parse.error
        assert parse.questions == tuple(h["question"] for h in claim["hops"])
        assert parse.verdict == row["verdict"] == claim["label"]
        model_turns = [t["text"] for t in row["turns"] if t["role"] == "model"]
        for k, hop in enumerate(claim["hops"][:-1]):  # bridge k is revealed by the k-th report
            bridge = hop["answer"]
            assert bridge not in claim["claim"]
            assert not any(bridge in text for text in model_turns[: k + 1]), (bridge, model_turns)
            assert bridge in parse.questions[k + 1]  # ... and the next question names it
        # after each report, what is left of the claim: the description just resolved replaced by
        # the bridge found, one "of" fewer each turn, a single fact before the last question
        body = claim["claim"][0].lower() + claim["claim"][1:].removesuffix(".")
        first = model_turns[0].split("First: ", 1)[1].split(".</think>")[0]
        assert first in body and first.count(" of ") == 1
        lefts = [text.split("Left: ", 1)[1].split(".</think>")[0] for text in model_turns[1:-1]]
        assert len(lefts) == len(claim["hops"]) - 1
        for k, left in enumerate(lefts):
            assert claim["hops"][k]["answer"] in left
            assert left.count(" of ") == len(claim["hops"]) - 2 - k
            assert body.endswith(left.split(claim["hops"][k]["answer"], 1)[1])  # the claim's own tail
        assert "Nothing left: " in model_turns[-1] and "Left: " not in model_turns[0]
    searches = [r for r in kept if r["agent"] == "search"]
    assert searches and len({r["prompt"] for r in searches}) == len(searches)  # one per sub-question
    gold = {h["question"]: h for c in claims for h in c["hops"]}
    for row in searches:
        parse = parse_search(_text(row))
        assert parse.format_valid, parse.error
        [passages] = [t["text"] for t in row["turns"] if t["role"] == "env"]
        hop = gold[row["prompt"]]
        assert hop["answer"] in parse.report and hop["answer"] in passages
        assert passages.startswith("Doc 1 (")  # the real retriever's formatted top-k, as the tool returns it
    assert all(r["reason"] == "retrieval_miss" for r in rejected)
    assert all(check_reference(r) is None for r in kept)
    pa.Table.from_pylist(kept, schema=REFERENCES)  # the contract holds
    pa.Table.from_pylist(rejected, schema=REFERENCES_REJECTED)
    assert world_references(claims, RetrieverTool(retriever, k=3)) == (kept, rejected)  # deterministic


class WrongPassages:
    """A retriever that never finds the gold passage."""

    def search(self, queries, k=3):
        return [[Hit("x-1", "Elsewhere", "Nothing relevant is written here.", 1.0)] for _ in queries]


def test_search_references_whose_passages_miss_the_gold_passage_are_rejected(world):
    claims, _ = world
    kept, rejected = world_references(claims, RetrieverTool(WrongPassages(), k=3))
    assert {r["agent"] for r in kept} == {"reasoning"}
    assert rejected and {(r["agent"], r["reason"]) for r in rejected} == {("search", "retrieval_miss")}


def test_validate_references_names_the_bad_row(world):
    claims, retriever = world
    kept, _ = world_references(claims[:2], RetrieverTool(retriever, k=3))
    broken = [dict(kept[0]), dict(kept[1], turns=kept[1]["turns"][:-1])]  # ends on a tool answer
    with pytest.raises(DataError, match="refs.parquet, row 1, field 'turns'"):
        validate_references(broken, "refs.parquet")


# --------------------------------------------------------------------------------------------
# rejection sampling of a teacher
# --------------------------------------------------------------------------------------------


class FakeTeacher:
    """A chat-only teacher that always verifies with one question and says Support; a claim
    holding ``[X]`` gets an answer outside the tags (invalid format)."""

    model_name = "fake-teacher"

    def complete_tokens(self, prompts, params):
        raise TokensUnsupported("chat only")

    @staticmethod
    def _reply(conv) -> str:
        system, user = conv[0]["content"], conv[1]["content"]
        answered = sum(m["role"] == "assistant" for m in conv)
        if system == REASONING_SYSTEM:
            if answered == 0:
                return "<think>I need the founder.</think>\n<question>Who founded Orlen Studios?</question>"
            if "[X]" in user:
                return "It is probably true."
            return "<think>Ilse Parrow founded it.</think>\n<verification>\\boxed{Support}</verification>"
        assert system == SEARCH_SYSTEM
        if answered == 0:
            return "<think>Look it up.</think>\n<search>Orlen Studios founder</search>"
        return "<report>Orlen Studios was founded by Ilse Parrow.</report>"

    def chat(self, conversations, params):
        return [[Completion(self._reply(c), finish_reason="stop")] for c in conversations]


class OneDoc:
    def search(self, queries, k=3):
        return [[Hit("p1", "Orlen Studios", "Orlen Studios was founded by Ilse Parrow.", 1.0)] for _ in queries]


CLAIMS = [
    {"id": "c1", "claim": "Ilse Parrow founded Orlen Studios.", "label": "SUPPORTS", "num_hops": 1},
    {"id": "c2", "claim": "Ilse Parrow never founded Orlen Studios.", "label": "REFUTES", "num_hops": 1},
    {"id": "c3", "claim": "Orlen Studios was founded by Ilse Parrow.", "label": "SUPPORTS", "num_hops": 1},
    {"id": "c4", "claim": "Orlen Studios has no founder.", "label": "REFUTES", "num_hops": 1},
    {"id": "c5", "claim": "[X] Orlen Studios was founded by Ilse Parrow.", "label": "SUPPORTS", "num_hops": 1},
]


def _teacher_params():
    from factrl.agents.haris import default_reasoning_params, default_search_params

    return {"reason_params": default_reasoning_params(max_turns=2), "search_params": default_search_params(max_turns=1)}


def test_rejection_sampling_keeps_only_right_verdicts_and_counts_the_rest():
    from factrl.recipes.warmup import reference_counts

    kept, rejected = teacher_references(CLAIMS, FakeTeacher(), RetrieverTool(OneDoc(), k=3), **_teacher_params())
    reasoning = [r for r in kept if r["agent"] == "reasoning"]
    assert sorted(r["claim_id"] for r in reasoning) == ["c1", "c3"]
    assert all(r["verdict"] == r["label"] == "SUPPORTS" for r in reasoning)
    assert sorted(r["claim_id"] for r in kept if r["agent"] == "search") == ["c1", "c3"]
    assert {(r["claim_id"], r["agent"], r["reason"]) for r in rejected} == {
        ("c2", "reasoning", "wrong_verdict"), ("c4", "reasoning", "wrong_verdict"),
        ("c5", "reasoning", "format_invalid"),
        ("c2", "search", "claim_rejected"), ("c4", "search", "claim_rejected"), ("c5", "search", "claim_rejected")}
    counts = reference_counts(kept, rejected)
    assert counts["references"] == {"reasoning": 2, "search": 2}
    assert counts["rejected"] == {"total": 6, "by_agent": {"reasoning": 3, "search": 3},
                                  "by_reason": {"claim_rejected": 3, "format_invalid": 1, "wrong_verdict": 2}}
    # the kept rows are references in the agents' protocol: the raw tool answers, <think> first
    for row in kept:
        assert check_reference(row) is None and row["teacher_model"] == "fake-teacher"
    [search] = [r for r in kept if r["claim_id"] == "c1" and r["agent"] == "search"]
    assert search["turns"][1]["text"] == "Doc 1 (Orlen Studios) Orlen Studios was founded by Ilse Parrow."
    [reason] = [r for r in kept if r["claim_id"] == "c1" and r["agent"] == "reasoning"]
    assert reason["turns"][1]["text"] == "Orlen Studios was founded by Ilse Parrow."  # the search agent's report


class CountingTeacher(FakeTeacher):
    def __init__(self):
        self.calls = 0

    def chat(self, conversations, params):
        self.calls += len(conversations)
        return super().chat(conversations, params)


def test_teacher_rollouts_resume_from_finished_chunks(tmp_path, monkeypatch):
    """A rerun (after a kill) reads finished chunks back instead of paying the teacher again."""
    from factrl.recipes import warmup

    monkeypatch.setattr(warmup, "TEACHER_CHUNK", 2)
    params = WarmupParams(enabled=True, source="teacher", teacher_max_turns=2)
    first = CountingTeacher()
    out = warmup.teacher_references_resumable(CLAIMS, first, RetrieverTool(OneDoc(), k=3), params, tmp_path)
    assert first.calls > 0 and len(list(tmp_path.glob("teacher-*.json"))) == 3
    (sorted(tmp_path.glob("teacher-*.json"))[0]).unlink()  # one chunk was lost in the kill
    again = CountingTeacher()
    assert warmup.teacher_references_resumable(CLAIMS, again, RetrieverTool(OneDoc(), k=3), params, tmp_path) == out
    assert 0 < again.calls < first.calls


def test_shrinking_claim_substitutes_each_bridge_and_declines_a_claim_it_cannot_read():
    from factrl.data.reference import shrinking_claim
    from factrl.data.world_entities import RELATION

    chain = [(RELATION["soundtrack"], "Fuzul", "Rili Sessions", []),
             (RELATION["recorded_by"], "Rili Sessions", "Kana Bevox", []),
             (RELATION["born_in"], "Kana Bevox", "Vuvos", []),
             (RELATION["located_in"], "Vuvos", "Debix", [])]
    claim = "The birthplace of the performer of the soundtrack of the film Fuzul lies in Debix."
    assert shrinking_claim(claim, chain) == (
        "the soundtrack of the film Fuzul",
        ["the birthplace of the performer of Rili Sessions lies in Debix",
         "the birthplace of Kana Bevox lies in Debix", "Vuvos lies in Debix"])
    assert shrinking_claim("The director of the film Lovel was born in Debix.", chain) is None
