"""The service's HARIS verifier: citations only from passages each search rollout retrieved and read;
the trace, usage and cost of each claim; a batch is one HARIS call."""

from __future__ import annotations

import pyarrow.parquet as pq

from factrl.agents.evidence import RecordingRetriever
from factrl.retrieval.index import Hit
from factrl.service.engine import HarisVerifier


def _question(prompt: str) -> str:
    return prompt.rsplit("Question: ", 1)[-1].split("<|im_end|>")[0].strip()


def world_reply(questions: dict[str, str]):
    """Reasoning: ask the claim's first hop question, then decide; search: search the question, then
    report Doc 1's text (what a trained search agent does)."""

    def reply(prompt: str) -> str:
        if "You collect the information" in prompt:
            after = prompt.rsplit("Question: ", 1)[-1]
            if "Doc 1 (" in after:
                doc = after.split("Doc 1 (", 1)[1].split("\n")[0]
                return f"<report>{doc.split(') ', 1)[1]}</report>"
            return f"x</think><search>{_question(prompt)}</search>"
        claim = prompt.rsplit("Claim: ", 1)[-1].split("<|im_end|>")[0].strip()
        if "<result>" in prompt.rsplit("Claim: ", 1)[-1]:
            return "ok</think><verification>\\boxed{Support}</verification>"
        return f"need it</think><question>{questions[claim]}</question>"

    return reply


def test_citations_quote_retrieved_passages_on_demo_claims(demo_world, demo_retriever, script_llm):
    claims, index_dir = demo_world
    passages = {p["id"]: p for p in pq.read_table(index_dir / "passages.parquet").to_pylist()}
    llm = script_llm(world_reply({c["claim"]: c["hops"][0]["question"] for c in claims}))
    recorder = RecordingRetriever(demo_retriever)
    verifier = HarisVerifier("demo", llm, llm, recorder, "smollm2-135m", "smollm2-135m", top_k=3, max_turns=2)
    results = verifier.verify([c["claim"] for c in claims])
    assert len(results) == len(claims) and len(llm.calls) < 4 * len(claims)  # batched, not one claim at a time
    cited = 0
    for claim, result in zip(claims, results):
        assert result["verdict"] == "SUPPORTS" and result["claim"] == claim["claim"]
        [question] = result["trace"]["questions"]
        assert question["question"] == claim["hops"][0]["question"] and question["report"]
        retrieved = {h["id"] for h in question["retrieved"]}
        assert retrieved and retrieved <= {h.id for hits in recorder.hits.values() for h in hits}
        for c in result["citations"]:
            cited += 1
            assert c["passage_id"] in retrieved
            text = passages[c["passage_id"]]["text"]
            assert text[c["start"]:c["end"]] == c["quote"] == c["passage_text"][c["start"]:c["end"]]
            assert c["quote"] in question["report"]  # the report copied Doc 1: its sentence is cited
        usage = result["usage"]
        assert usage["model_calls"] == 4 and usage["tokens_in"] > usage["tokens_out"] > 0 and not usage["estimated"]
        # the scripted LLM reports no log-probs: the run's confidence is uninformative (factrl.agents.confidence)
        assert result["cost_usd"] == 0.0 and result["raw_confidence"] == 0.5
    assert cited >= len(claims)


class KeyedRetriever:
    """Fixed hits per query."""

    HITS = {"Orsa founder": [Hit("p-orsa", "Orsa", "Orsa is a company. It was founded by Ilse in Tessik.", 1.0)],
            "Tessik mayor": [Hit("p-tessik", "Tessik", "Tessik is a city. The mayor of Tessik is Bo Lind.", 1.0)]}

    def search(self, queries, k=3):
        return [self.HITS.get(q, []) for q in queries]


def test_a_report_never_gets_a_passage_its_search_did_not_retrieve(script_llm):
    """Claim 1's search agent reports a fact of a passage only claim 2's search retrieved (in the same
    batch): claim 1 may not cite it."""
    asks = {"Ilse founded Orsa.": ("Who founded Orsa?", "Orsa founder"),
            "Bo Lind is the mayor of Tessik.": ("Who is the mayor of Tessik?", "Tessik mayor")}
    searches = dict(asks.values())

    def reply(prompt: str) -> str:
        if "You collect the information" in prompt:
            if "<result>" in prompt.rsplit("Question: ", 1)[-1]:
                return "<report>The mayor of Tessik is Bo Lind.</report>"
            return f"x</think><search>{searches[_question(prompt)]}</search>"
        tail = prompt.rsplit("Claim: ", 1)[-1]
        if "<result>" in tail:
            return "ok</think><verification>\\boxed{Refute}</verification>"
        return f"q</think><question>{asks[tail.split('<|im_end|>')[0].strip()][0]}</question>"

    llm = script_llm(reply)
    verifier = HarisVerifier("demo", llm, llm, KeyedRetriever(), "smollm2-135m", "smollm2-135m", max_turns=1)
    orsa, tessik = verifier.verify(list(asks))
    assert [c["passage_id"] for c in tessik["citations"]] == ["p-tessik"]
    assert tessik["citations"][0]["quote"] == "The mayor of Tessik is Bo Lind."
    assert "p-tessik" not in {c["passage_id"] for c in orsa["citations"]}
    assert [c["quote"] for c in orsa["citations"]] == ["It was founded by Ilse in Tessik."]  # shares "tessik"
    assert orsa["trace"]["questions"][0]["retrieved"] == [{"id": "p-orsa", "title": "Orsa"}]


def test_cost_of_an_endpoint_comes_from_the_price_table(script_llm):
    llm = script_llm(lambda prompt: "<think>x</think><verification>\\boxed{Support}</verification>")
    priced = HarisVerifier("api", llm, llm, KeyedRetriever(), "openai:gpt-x@http://h/v1", "openai:gpt-x@http://h/v1",
                           prices={"openai:gpt-x": (2.0, 10.0)})
    [result] = priced.verify(["Ilse founded Orsa."])
    usage = result["usage"]
    assert usage["model_calls"] == 1 and result["citations"] == []
    assert result["cost_usd"] == usage["tokens_in"] * 2.0 / 1e6 + usage["tokens_out"] * 10.0 / 1e6 > 0
    unpriced = HarisVerifier("api", llm, llm, KeyedRetriever(), "openai:other", "openai:other")
    assert unpriced.verify(["Ilse founded Orsa."])[0]["cost_usd"] is None
