"""Retrieval service: real HTTP round trip, Search-R1 response format, 4xx limits, client retries."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from factrl.retrieval.client import RetrievalClient, RetrievalError
from factrl.retrieval.index import Hit, Retriever
from factrl.retrieval.server import BatchPolicy, Limits, MicroBatcher, create_app
from factrl.testing.servers import running_app


@pytest.fixture(scope="module")
def server_url(minilm_index):
    app = create_app(Retriever(minilm_index, mode="bm25"), Limits(max_queries=4, max_query_chars=50))
    with running_app(app) as url:
        yield url


def test_http_round_trip_finds_gold(server_url, questions):
    with RetrievalClient(server_url) as client:
        assert client.health()["passages"] == 10
        hits = client.search([q for q, _ in questions[:4]], k=3)
    assert [h[0].id for h in hits] == [gold for _, gold in questions[:4]]
    assert hits[0][0].title == "Marie Curie" and hits[0][0].score > 0


def test_response_has_search_r1_layout(server_url):
    body = httpx.post(
        f"{server_url}/retrieve",
        json={"queries": ["Who discovered penicillin?"], "topk": 2, "return_scores": True},
    ).json()
    first = body["result"][0][0]
    assert set(first) == {"document", "score"}
    assert first["document"]["id"] == "p9"
    assert first["document"]["contents"].startswith('"Penicillin"\n')
    plain = httpx.post(f"{server_url}/retrieve", json={"queries": ["penicillin"], "topk": 1}).json()
    assert set(plain["result"][0][0]) == {"id", "contents"}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"queries": ["a"] * 5}, "at most 4"),
        ({"queries": ["x" * 51]}, "limit is 50"),
        ({"queries": []}, "at least 1"),
        ({"queries": ["a"], "topk": 0}, "greater than or equal to 1"),
        ({"queries": ["a"], "topk": 1000}, "less than or equal to 100"),
        ({"topk": 3}, "Field required"),
    ],
)
def test_bad_requests_get_4xx_with_message(server_url, payload, message):
    response = httpx.post(f"{server_url}/retrieve", json=payload)
    assert response.status_code == 422
    assert message in response.text


def test_client_raises_4xx_without_retrying(server_url):
    with RetrievalClient(server_url, retries=3, backoff=5.0) as client:
        started = time.monotonic()
        with pytest.raises(RetrievalError, match="HTTP 422"):
            client.search(["a"] * 5)
        assert time.monotonic() - started < 2  # no backoff sleeps


def test_client_retries_transient_errors():
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            raise httpx.ConnectError("refused")
        if calls["n"] == 2:
            return httpx.Response(503, text="busy")
        doc = {"id": "a", "contents": '"T"\nbody'}
        return httpx.Response(200, json={"result": [[{"document": doc, "score": 1.5}]]})

    client = RetrievalClient("http://test", backoff=0.0, transport=httpx.MockTransport(handler))
    hits = client.search(["q"], k=1)
    assert calls["n"] == 3 and hits[0][0].title == "T" and hits[0][0].text == "body"


def test_client_gives_up_after_retries():
    client = RetrievalClient(
        "http://test", retries=2, backoff=0.0,
        transport=httpx.MockTransport(lambda r: httpx.Response(500, text="boom")),
    )
    with pytest.raises(RetrievalError, match="after 3 attempts"):
        client.search(["q"])


def _recording_search(calls):
    def search(queries, k):
        calls.append((list(queries), k))
        return [[Hit(f"{q}-{i}", "", q, float(-i)) for i in range(k)] for q in queries]

    return search


def test_microbatcher_answers_concurrent_requests_with_one_search():
    calls = []
    batcher = MicroBatcher(_recording_search(calls), BatchPolicy(max_wait_ms=20))

    async def main():
        return await asyncio.gather(*(batcher.submit([f"q{i}", f"r{i}"], 2) for i in range(8)))

    results = asyncio.run(main())
    assert len(calls) == 1 and len(calls[0][0]) == 16
    for i, hits in enumerate(results):  # each request gets back exactly its own queries' hits
        assert [[h.id for h in row] for row in hits] == [[f"q{i}-0", f"q{i}-1"], [f"r{i}-0", f"r{i}-1"]]


def test_microbatcher_splits_by_topk_and_caps_batch_size():
    calls = []
    batcher = MicroBatcher(_recording_search(calls), BatchPolicy(max_wait_ms=20, max_queries=4))

    async def main():
        jobs = [batcher.submit([f"a{i}"], 1) for i in range(6)] + [batcher.submit(["b"], 3)]
        return await asyncio.gather(*jobs)

    results = asyncio.run(main())
    assert [len(q) for q, _ in calls] == [4, 2, 1]  # first batch closed at 4 queries
    assert {k for _, k in calls} == {1, 3}
    assert [len(r[0]) for r in results] == [1] * 6 + [3]


def test_microbatcher_passes_search_errors_to_every_waiting_request():
    def broken(queries, k):
        raise RuntimeError("index gone")

    batcher = MicroBatcher(broken, BatchPolicy(max_wait_ms=5))

    async def main():
        return await asyncio.gather(*(batcher.submit(["q"], 1) for _ in range(3)),
                                    return_exceptions=True)

    assert all(isinstance(r, RuntimeError) for r in asyncio.run(main()))


def test_concurrent_http_clients_share_batched_searches(minilm_index, questions):
    retriever = Retriever(minilm_index, mode="dense")
    expected = {q: [h.id for h in row] for q, row in
                zip([q for q, _ in questions], retriever.search([q for q, _ in questions], 3))}
    app = create_app(retriever, batching=BatchPolicy(max_wait_ms=50))
    with running_app(app) as url, RetrievalClient(url) as client:
        queries = [q for q, _ in questions] * 4
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda q: client.search([q], k=3)[0], queries))
        health = client.health()
    assert [[h.id for h in row] for row in got] == [expected[q] for q in queries]
    assert health["queries_served"] == len(queries)
    assert health["batched_searches"] < len(queries)  # requests were gathered into batches
