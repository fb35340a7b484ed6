"""Baselines: RAG, Decompose-Then-Verify (logical AND), and the single agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from factrl.agents.baselines import and_verdict, decompose_then_verify, parse_subclaims, rag, single_agent
from factrl.llm.base import Completion
from factrl.retrieval.index import Hit

HARIS_EVAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "haris_eval"


class FakeChat:
    """Chat fake: decomposition -> two bullet lines; verification -> Refute iff 'moon' in the claim."""

    model_name = "fake"

    def __init__(self):
        self.prompts = []

    def chat(self, conversations, params):
        out = []
        for conv in conversations:
            user = conv[-1]["content"]
            self.prompts.append(user)
            if conv[0]["content"].startswith("Split a claim"):
                text = "- Alice was born in Paris.\n- Paris is on the moon.\n" if "Alice" in user else "nonsense"
            else:
                claim = user.split("\n")[0]
                text = "Verdict: Refute" if "moon" in claim else "Verdict: Support"
            out.append([Completion(text)])
        return out

    def complete_tokens(self, prompts, params):
        raise NotImplementedError


class FixedRetriever:
    def search(self, queries, k=3):
        return [[Hit(f"p{i}", "T", f"passage {i} for {q}", 1.0) for i in range(k)] for q in queries]


def test_and_verdict():
    assert and_verdict(["SUPPORTS", "SUPPORTS"]) == "SUPPORTS"
    assert and_verdict(["SUPPORTS", "REFUTES"]) == "REFUTES"
    assert and_verdict(["SUPPORTS", None]) is None
    assert and_verdict([None, "REFUTES"]) == "REFUTES"
    assert and_verdict([]) is None


def test_parse_subclaims():
    assert parse_subclaims("- A is a B.\n1. C is in D.\n- A is a B.\nplain line\n- x") == ["A is a B.", "C is in D."]


def test_decompose_then_verify_ands_subclaims():
    llm = FakeChat()
    a, b = decompose_then_verify(["Alice was born on the moon city.", "Bob is tall."], llm=llm, retriever=FixedRetriever())
    assert a.subclaims == ["Alice was born in Paris.", "Paris is on the moon."]
    assert a.sub_verdicts == ["SUPPORTS", "REFUTES"] and a.verdict == "REFUTES"
    assert b.subclaims == ["Bob is tall."] and b.verdict == "SUPPORTS"  # undecomposable: verified whole
    assert all(c.count("Doc ") == 3 for c in a.contexts)


def test_rag_uses_claim_as_query_with_top3():
    llm = FakeChat()
    [r] = rag(["Sun is hot."], llm=llm, retriever=FixedRetriever())
    assert r.verdict == "SUPPORTS"
    assert "passage 2 for Sun is hot." in r.contexts[0] and r.contexts[0].count("Doc ") == 3
    assert "Context: Doc 1 (T) passage 0 for Sun is hot." in llm.prompts[0]


def test_single_agent_with_scripted_model(script_llm):
    def reply(prompt):
        user = prompt.rsplit("Claim: ", 1)[-1]
        if "Doc 1" in user:
            return "<think>done</think><verification>\\boxed{Refute}</verification>"
        return "check</think><search>Orsa founder</search>"
    [r] = single_agent(["Orsa was founded in 1900."], llm=script_llm(reply), retriever=FixedRetriever())
    assert r.verdict == "REFUTES" and r.parse.format_valid, r.trajectory.response_text
    assert r.trajectory.queries == ["Orsa founder"] and "passage 0 for Orsa founder" in r.contexts[0]


@pytest.fixture(scope="module")
def haris_eval_index(tmp_path_factory):
    if not (HARIS_EVAL / "passages.jsonl").exists():
        pytest.skip(f"shared HARIS eval data not found at {HARIS_EVAL}")
    from factrl.data.schemas import PASSAGES
    from factrl.data.sources import read_passages_jsonl
    from factrl.io import write_parquet
    from factrl.retrieval.index import build_index

    d = tmp_path_factory.mktemp("haris_eval")
    write_parquet(read_passages_jsonl(HARIS_EVAL / "passages.jsonl"), d / "passages.parquet", PASSAGES)
    build_index(d / "passages.parquet", d / "index", embedder=None)
    return d / "index"


def test_rag_on_haris_eval_sample(local_llm, haris_eval_index):
    """The RAG baseline with SmolLM2 over BM25 on the shared HOVER sample (6 claims)."""
    from factrl.data.sources import read_claims_jsonl
    from factrl.retrieval.index import Retriever

    claims = read_claims_jsonl(HARIS_EVAL / "hover_2hop.jsonl").slice(0, 6).to_pylist()
    results = rag([c["claim"] for c in claims], llm=local_llm, retriever=Retriever(haris_eval_index, mode="bm25"))
    assert len(results) == 6
    for _c, r in zip(claims, results):
        assert r.verdict in {"SUPPORTS", "REFUTES", None}
        assert r.contexts[0].count("Doc ") == 3
        if r.verdict is None:
            assert r.errors  # an unparseable reply is reported, never coerced
    # BM25 with the claim as query finds gold evidence for most 2-hop HOVER claims
    found = sum(any(e[:60] in r.contexts[0] for e in c["evidence"]) for c, r in zip(claims, results))
    assert found >= 3
