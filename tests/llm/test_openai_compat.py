"""OpenAICompatLLM against a fault-injecting OpenAI-compatible server (src/factrl/testing/fault_llm.py): every item
of a 200-call batch comes back exactly once despite 429s, 500s, 503s, timeouts, dropped connections,
malformed or truncated bodies and wrong numbers of choices; a cached rerun
sends zero requests; the API key reaches the server but never the cache or the logs."""

import logging
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from factrl.llm.base import SamplingParams, TokensUnsupported
from factrl.llm.cache import CachedLLM, DiskCache
from factrl.llm.openai_compat import OpenAICompatLLM
from factrl.testing.fault_llm import FaultyOpenAI, first_attempt_fails

SECRET = "sk-test-SECRET-0123456789"


# every fault of factrl.testing.fault_llm, each on the first attempt of every tenth item (kind 9: none)
KINDS = ["rate_limit", "server_error", "unavailable", "timeout", "bad_json", "truncated_json",
         "wrong_choices", "no_choices", "dropped", None]


@pytest.fixture
def fault_server(serve_app):
    server = FaultyOpenAI(first_attempt_fails(KINDS, lambda content: int(content.split()[-1])))
    return serve_app(server.app), server


def test_200_calls_through_faults(fault_server, tmp_path, monkeypatch, caplog):
    url, server = fault_server
    monkeypatch.setenv("FACTRL_TEST_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    client = OpenAICompatLLM(
        "fake-model", base_url=url, api_key_env="FACTRL_TEST_KEY", concurrency=32,
        timeout=3.0, backoff_base=0.05, price_per_mtok=(1.0, 2.0),
    )
    llm = CachedLLM(client, DiskCache(tmp_path / "cache.sqlite"))
    convs = [[{"role": "user", "content": f"item {i}"}] for i in range(200)]
    t0 = time.time()
    out = llm.chat(convs, SamplingParams(max_tokens=8))
    assert [o[0].text for o in out] == [f"echo item {i} #0" for i in range(200)]  # none lost or swapped
    assert time.time() - t0 >= 1.0  # Retry-After honoured
    assert server.auth == {f"Bearer {SECRET}"}
    # each fault struck 20 items once; each item was sent once more after its fault, never again
    assert server.faults == {kind: 20 for kind in KINDS if kind is not None}
    assert all(server.attempts[f"item {i}"] == (1 if KINDS[i % 10] is None else 2) for i in range(200))
    assert client.usage.requests == 200 and client.usage.retries == 180
    assert client.usage.prompt_tokens == 600 and client.usage.cost_usd == pytest.approx((600 + 2 * 400) / 1e6)

    before = server.requests
    again = CachedLLM(client, DiskCache(tmp_path / "cache.sqlite")).chat(convs, SamplingParams(max_tokens=8))
    assert again == out and server.requests == before  # rerun: zero requests

    for f in tmp_path.iterdir():
        assert SECRET.encode() not in f.read_bytes()
    assert SECRET not in caplog.text and SECRET not in repr(client)


def test_n_and_stop_and_tokens_unsupported(fault_server):
    url, _ = fault_server
    client = OpenAICompatLLM("fake-model", base_url=url, api_key="k", backoff_base=0.01, timeout=1.0)
    out = client.chat([[{"role": "user", "content": "item 9"}]], SamplingParams(n=3, stop=("</a>",)))
    assert [c.text for c in out[0]] == [f"echo item 9 #{k}</a>" for k in range(3)]
    with pytest.raises(TokensUnsupported):
        client.complete_tokens([[1]], SamplingParams())


def test_non_transient_error_not_retried(serve_app):
    app = FastAPI()
    hits = []

    @app.post("/v1/chat/completions")
    async def chat():
        hits.append(1)
        return JSONResponse({"error": {"message": "bad request"}}, 400)

    client = OpenAICompatLLM("m", base_url=serve_app(app), api_key="k")
    import openai

    with pytest.raises(openai.BadRequestError):
        client.chat([[{"role": "user", "content": "x"}]], SamplingParams())
    assert len(hits) == 1


def test_failed_request_keeps_the_batch_answers_that_arrived(serve_app, tmp_path):
    """One request of a batch fails for good: the others are cached anyway, so the rerun (after
    the fault is gone) sends exactly the one request that failed."""
    state = {"broken": True, "sent": []}
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        content = body["messages"][-1]["content"]
        state["sent"].append(content)
        if state["broken"] and content == "item 3":
            return JSONResponse({"error": {"message": "bad request"}}, 400)
        return {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": f"echo {content}"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}

    client = OpenAICompatLLM("m", base_url=serve_app(app), api_key="k", concurrency=2)
    convs = [[{"role": "user", "content": f"item {i}"}] for i in range(6)]
    import openai

    with pytest.raises(openai.BadRequestError):
        CachedLLM(client, DiskCache(tmp_path / "c.sqlite")).chat(convs, SamplingParams(max_tokens=4))
    assert sorted(state["sent"]) == [f"item {i}" for i in range(6)]  # the rest were still answered
    state["broken"], state["sent"] = False, []
    out = CachedLLM(client, DiskCache(tmp_path / "c.sqlite")).chat(convs, SamplingParams(max_tokens=4))
    assert state["sent"] == ["item 3"]
    assert [o[0].text for o in out] == [f"echo item {i}" for i in range(6)]
