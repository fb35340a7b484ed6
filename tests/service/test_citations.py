"""Sentences with offsets, the best-matching sentence of the retrieved passages, and every citation of
the service's answers on 50 demo claims checked against what each claim's searches retrieved."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from factrl.agents.citations import cite, sentence_spans
from factrl.retrieval.index import Hit
from factrl.testing.service_fakes import app_of, make_service, wait_done


def test_sentence_spans_cover_the_text_exactly():
    text = "Mupom is a 2018 film.  It runs for 177 minutes! \"Why?\" Nobody knows"
    spans = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == ["Mupom is a 2018 film.", "It runs for 177 minutes!", "\"Why?\"",
                                             "Nobody knows"]


def test_cite_picks_the_best_sentence_of_the_hits_and_none_without_overlap():
    hits = [Hit("a", "Orsa", "Orsa is a company. It was founded by Ilse Parrow.", 2.0),
            Hit("b", "Ilse", "Ilse Parrow was born in Tessik. She founded Orsa in 1990.", 1.0)]
    c = cite("Where was Ilse Parrow born?", "Ilse Parrow was born in Tessik.", hits)
    assert (c.passage_id, c.quote) == ("b", "Ilse Parrow was born in Tessik.")
    assert hits[1].text[c.start:c.end] == c.quote and c.overlap == 4
    assert cite("q", "completely unrelated words", hits) is None
    assert cite("q", "anything", []) is None


# --------------------------------------------------------------------------------------------
# every citation of the service's answers on 50 demo claims: in the passage, and retrieved by that claim
# --------------------------------------------------------------------------------------------

class QueryLog:
    """The test's own record of what the index returned for each query (ids in rank order), kept
    apart from the service's bookkeeping, so the check below does not trust the code it checks."""

    def __init__(self, retriever) -> None:
        self.retriever = retriever
        self.hits: dict[str, list[str]] = {}

    def search(self, queries, k=3):
        found = self.retriever.search(list(queries), k=k)
        for query, hits in zip(queries, found):
            self.hits.setdefault(query.strip(), [h.id for h in hits])
        return found


@pytest.fixture(scope="module")
def world50(tmp_path_factory):
    """(50 two-hop claims as dicts, the index directory, {passage id: text}) of a 300-passage demo world."""
    from factrl.data.params import WorldParams
    from factrl.data.world import write_world
    from factrl.retrieval.index import build_index

    d = tmp_path_factory.mktemp("world50")
    write_world(WorldParams(seed=5, num_passages=300, num_claims=50, hops=(2,)), d / "p.parquet", d / "c.parquet")
    build_index(d / "p.parquet", d / "index", embedder=None)
    passages = {p["id"]: p["text"] for p in pq.read_table(d / "index" / "passages.parquet").to_pylist()}
    return pq.read_table(d / "c.parquet").to_pylist(), d / "index", passages


def verify_through_the_service(tmp_path, claims, verifier, timeout=120.0) -> list[dict]:
    """The claims as one JSONL batch through the service's app (job store, batching worker, the
    verifier): the results in claim order."""
    from fastapi.testclient import TestClient

    svc = make_service(tmp_path, {"demo": verifier}, batch_size=len(claims), max_wait_ms=2000)
    try:
        client = TestClient(app_of(svc))
        body = "\n".join(json.dumps({"id": f"c{i}", "claim": c}) for i, c in enumerate(claims))
        answer = client.post("/v1/verify/batch", content=body)
        assert answer.status_code == 200, answer.text
        job = wait_done(client, answer.json()["job_id"], timeout=timeout)
    finally:
        svc.worker.stop()
    assert job["failed"] == 0, [r.get("error") for r in job["results"] if r["status"] == "failed"]
    return job["results"]


def assert_citations_retrieved_and_quoted(results, searched_by_claim, log: QueryLog, passages) -> int:
    """Every citation quotes ``passages[id][start:end]`` and cites a passage that the claim's own
    searches (``searched_by_claim[claim]``: the queries it issued) got back from the index. The count."""
    count = 0
    for result in results:
        retrieved = {pid for q in searched_by_claim[result["claim"]] for pid in log.hits.get(q.strip(), [])}
        for c in result["citations"]:
            count += 1
            assert c["passage_id"] in retrieved, (
                f"claim {result['claim']!r} cites {c['passage_id']}, which its searches "
                f"{searched_by_claim[result['claim']]} did not retrieve ({sorted(retrieved)})")
            assert passages[c["passage_id"]][c["start"]:c["end"]] == c["quote"] != ""
    return count


def run_50_claims_with_a_misreporting_agent(world50, tmp_path, script_llm) -> None:
    """50 demo claims through the service with the real engine, retriever, scheduler and citation code
    and a scripted pair of agents, then the check. Every other claim's search agent reports a passage
    that only its neighbour's search retrieved (in the same batch): the service must not cite it."""
    from factrl.retrieval.index import Retriever
    from factrl.service.engine import HarisVerifier

    claims, index_dir, passages = world50
    assert len(claims) == 50
    bm25 = Retriever(index_dir, mode="bm25")
    question = {c["claim"]: c["hops"][0]["question"] for c in claims}
    hits = {q: bm25.search([q], k=3)[0] for q in question.values()}
    # an odd claim's report: the top passage of its even neighbour's search that its own search missed
    foreign: dict[str, str] = {}
    for even, odd in zip(claims[0::2], claims[1::2]):
        mine = {h.id for h in hits[question[odd["claim"]]]}
        other = [h for h in hits[question[even["claim"]]] if h.id not in mine]
        if other:
            foreign[question[odd["claim"]]] = other[0].text
    assert len(foreign) >= 20

    def reply(prompt: str) -> str:
        if "You collect the information" in prompt:  # the search agent
            asked = prompt.rsplit("Question: ", 1)[-1]
            q = asked.split("<|im_end|>")[0].strip()
            if "Doc 1 (" not in asked:
                return f"x</think><search>{q}</search>"
            if q in foreign:
                return f"<report>{foreign[q]}</report>"
            doc = asked.split("Doc 1 (", 1)[1].split("\n")[0]
            return f"<report>{doc.split(') ', 1)[1]}</report>"
        tail = prompt.rsplit("Claim: ", 1)[-1]
        if "<result>" in tail:
            return "ok</think><verification>\\boxed{Support}</verification>"
        return f"need it</think><question>{question[tail.split('<|im_end|>')[0].strip()]}</question>"

    log = QueryLog(bm25)
    llm = script_llm(reply)
    verifier = HarisVerifier("demo", llm, llm, log, "smollm2-135m", "smollm2-135m", top_k=3, max_turns=2)
    results = verify_through_the_service(tmp_path, [c["claim"] for c in claims], verifier)
    assert [r["claim"] for r in results] == [c["claim"] for c in claims]
    honest = [r for r in results if question[r["claim"]] not in foreign]
    assert all(r["citations"] for r in honest)  # not vacuous: every honest report is cited
    assert_citations_retrieved_and_quoted(results, {c: [q] for c, q in question.items()}, log, passages)


def test_every_citation_on_50_demo_claims_quotes_a_passage_that_claim_retrieved(world50, tmp_path, script_llm):
    run_50_claims_with_a_misreporting_agent(world50, tmp_path, script_llm)


def test_the_50_claim_check_catches_citations_from_another_claims_search(world50, tmp_path, script_llm, monkeypatch):
    """The check above bites: with citation candidates taken from every search of the batch (a
    plausible bug) instead of the claim's own, the misreported passages get cited and it fails."""
    import factrl.agents.evidence as evidence

    def every_hit_of_the_batch(search, recorded):
        return [h for hits in recorded.values() for h in hits]

    monkeypatch.setattr(evidence, "seen_hits", every_hit_of_the_batch)
    with pytest.raises(AssertionError, match="did not retrieve"):
        run_50_claims_with_a_misreporting_agent(world50, tmp_path, script_llm)


@pytest.mark.slow
def test_citations_of_real_smollm2_agents_quote_passages_their_claim_retrieved(world50, tmp_path, local_llm):
    """The same guarantee with real SmolLM2 agents (the base model, greedy) on 8 demo claims: whatever
    the agents search and report, a citation quotes a passage that claim's own searches retrieved."""
    from factrl.retrieval.index import Retriever
    from factrl.service.engine import HarisVerifier

    claims, index_dir, passages = world50
    log = QueryLog(Retriever(index_dir, mode="bm25"))
    verifier = HarisVerifier("base", local_llm, local_llm, log, "smollm2-135m", "smollm2-135m", top_k=3,
                             max_turns=2, max_new_tokens=48)
    results = verify_through_the_service(tmp_path, [c["claim"] for c in claims[:8]], verifier, timeout=900)
    searched = {r["claim"]: [s for q in r["trace"]["questions"] for s in q["searches"]] for r in results}
    count = assert_citations_retrieved_and_quoted(results, searched, log, passages)
    print(f"{count} citations on 8 claims; searches {sum(map(len, searched.values()))}")
