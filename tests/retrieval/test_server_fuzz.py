"""Bad input, property-based: request bodies of ``factrl serve-retriever`` over a real BM25 index.
Any JSON, any bytes: a 200 with one result list per query, or a 400/413/422 whose detail says what is
wrong; never a 500, and the server answers a good request afterwards."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from factrl.retrieval.index import Retriever
from factrl.retrieval.server import Limits, create_app
from tests.fuzz import json_values, tried

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])
LIMITS = Limits(max_queries=8, max_query_chars=200, max_topk=10, max_body_bytes=20_000)
queries = st.one_of(json_values, st.lists(st.one_of(st.text(max_size=250), json_values), max_size=10))
bodies = st.fixed_dictionaries({}, optional={"queries": queries, "topk": json_values, "return_scores": json_values,
                                             "extra": json_values})


@pytest.fixture(scope="module")
def client(demo_world):
    with TestClient(create_app(Retriever(demo_world[1], mode="bm25"), LIMITS), raise_server_exceptions=False) as c:
        yield c


def check(client, content: bytes) -> None:
    answer = client.post("/retrieve", content=content, headers={"content-type": "application/json"})
    assert answer.status_code in (200, 400, 413, 422), (answer.status_code, content[:300], answer.text[:300])
    if answer.status_code == 200:
        assert len(answer.json()["result"]) == len(json.loads(content)["queries"])
    else:
        assert answer.json()["detail"], answer.text


@FUZZ
@given(body=bodies)
@example(body={"topk": float("inf")})  # was a 500: the validation error echoed Infinity, which JSON cannot encode
@example(body={"queries": ["x"], "topk": float("nan")})
def test_any_json_body_gets_a_clean_answer(client, body):
    tried("serve_retriever.retrieve")
    check(client, json.dumps(body).encode())


@FUZZ
@given(raw=st.binary(max_size=200))
def test_any_bytes_get_a_clean_answer(client, raw):
    tried("serve_retriever.raw_bytes")
    check(client, raw)


def test_oversized_body_is_413_and_the_server_still_answers(client):
    huge = json.dumps({"queries": ["x" * 150] * 200}).encode()
    answer = client.post("/retrieve", content=huge)
    assert answer.status_code == 413 and "max_body_bytes" in answer.json()["detail"]
    after = client.post("/retrieve", json={"queries": ["studio founder"], "topk": 2})
    assert after.status_code == 200 and len(after.json()["result"]) == 1
