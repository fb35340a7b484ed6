"""serve-llm: a real server on a free port answered through the ``openai`` client, batching
concurrent requests into one engine call with the same results as in-process."""

import asyncio

import openai
import pytest

from factrl.llm.base import SamplingParams
from factrl.llm.openai_compat import OpenAICompatLLM
from factrl.llm.serve import Batcher, create_app, params_from_request

QS = [[{"role": "user", "content": q}] for q in ("What is the capital of France?", "Name a color.", "Say hi.")]


class SpyLLM:
    """Records the batch sizes the engine is called with."""

    def __init__(self, inner):
        self.inner, self.model_name, self.batches = inner, inner.model_name, []

    def chat(self, conversations, params):
        self.batches.append(len(conversations))
        return self.inner.chat(conversations, params)


def test_openai_client_against_real_server(local_llm, serve_app):
    spy = SpyLLM(local_llm)
    url = serve_app(create_app(spy, window_ms=50))
    raw = openai.OpenAI(base_url=url, api_key="unused")
    assert [m.id for m in raw.models.list().data] == [local_llm.model_name]
    resp = raw.chat.completions.create(model=local_llm.model_name, messages=QS[0], max_tokens=8, temperature=0)
    assert "Paris" in resp.choices[0].message.content and resp.usage.completion_tokens > 0

    params = SamplingParams(max_tokens=8)
    client = OpenAICompatLLM(local_llm.model_name, base_url=url, api_key="unused")
    spy.batches.clear()
    remote = client.chat(QS, params)
    local = local_llm.chat(QS, params)
    assert [r[0].text for r in remote] == [x[0].text for x in local]
    assert spy.batches == [3]  # three concurrent requests, one engine batch


def test_stop_reason_reported(local_llm, serve_app):
    url = serve_app(create_app(local_llm))
    client = OpenAICompatLLM(local_llm.model_name, base_url=url, api_key="unused")
    out = client.chat([QS[0]], SamplingParams(max_tokens=16, stop=("Paris", "zz")))[0][0]
    assert out.text.endswith("Paris") and out.finish_reason == "stop"
    bare = client.chat([QS[0]], SamplingParams(max_tokens=16, stop=("Paris", "zz"), include_stop=False))[0][0]
    assert bare.text == out.text[: -len("Paris")]


def test_token_prompts_over_http_match_the_engine(local_llm, serve_app):
    """/v1/completions with token ids (what a vLLM client sends): the ids come back as vLLM returns
    them (a final EOS included), and the client's completions equal the in-process engine's, for
    an EOS stop, a stop string and the token budget."""
    url = serve_app(create_app(local_llm))
    prompts = [local_llm.encode_chat(q) for q in QS]
    raw = openai.OpenAI(base_url=url, api_key="unused").completions.create(
        model=local_llm.model_name, prompt=prompts[2], max_tokens=32, temperature=0,
        extra_body={"return_token_ids": True, "include_stop_str_in_output": True})
    [[ended]] = local_llm.complete_tokens([prompts[2]], SamplingParams(max_tokens=32))
    assert ended.finish_reason == "stop" and ended.token_ids[-1] in local_llm.eos_ids
    assert raw.choices[0].token_ids == ended.token_ids
    client = OpenAICompatLLM(local_llm.model_name, base_url=url, api_key="unused", tokenizer=local_llm.tokenizer)
    assert client.encode_chat(QS[0]) == prompts[0]
    prompts = [prompts[0], prompts[2]]  # a stop string ("Paris") and an EOS within the budget
    for params in (SamplingParams(max_tokens=32), SamplingParams(max_tokens=16, stop=("Paris",)),
                   SamplingParams(max_tokens=3)):
        remote = client.complete_tokens(prompts, params)
        local = local_llm.complete_tokens(prompts, params)
        for (r,), (x,) in zip(remote, local):
            assert (r.text, r.token_ids, r.finish_reason) == (x.text, x.token_ids, x.finish_reason), params
    assert {c[0].finish_reason for c in client.complete_tokens(prompts, SamplingParams(max_tokens=3))} == {"length"}


def test_chat_only_client_says_tokens_unsupported(local_llm, serve_app):
    from factrl.llm.base import TokensUnsupported

    url = serve_app(create_app(local_llm))
    client = OpenAICompatLLM(local_llm.model_name, base_url=url, api_key="unused")
    with pytest.raises(TokensUnsupported, match="no tokenizer"):
        client.complete_tokens([[1, 2, 3]], SamplingParams(max_tokens=2))


def test_params_from_request_reads_vllm_ignore_eos():
    assert params_from_request({"messages": [], "ignore_eos": True}).ignore_eos
    assert not params_from_request({"messages": []}).ignore_eos


def test_params_from_request_defaults():
    p = params_from_request({"messages": [], "stop": "x", "max_tokens": 5})
    assert p.stop == ("x",) and p.max_tokens == 5 and p.temperature == 1.0 and p.n == 1


def test_batcher_groups_by_params():
    class Echo:
        model_name = "echo"
        calls = []

        def chat(self, convs, params):
            self.calls.append((len(convs), params.max_tokens))
            from factrl.llm.base import Completion

            return [[Completion(text=c[0]["content"])] for c in convs]

    llm = Echo()

    async def go():
        b = Batcher(llm, window_ms=30)
        tasks = [b.submit([{"role": "user", "content": str(i)}], SamplingParams(max_tokens=1 + i % 2)) for i in range(6)]
        return await asyncio.gather(*tasks)

    out = asyncio.run(go())
    assert [o[0].text for o in out] == [str(i) for i in range(6)]
    assert sorted(llm.calls) == [(3, 1), (3, 2)]


class SlowEcho:
    """Echoes each prompt after ``delay`` seconds per call; records every prompt it generated for."""

    model_name = "echo"

    def __init__(self, delay: float) -> None:
        self.delay, self.prompts = delay, []

    def chat(self, conversations, params):
        import time

        from factrl.llm.base import Completion

        self.prompts += [c[-1]["content"] for c in conversations]
        time.sleep(self.delay)
        return [[Completion(text=c[-1]["content"], token_ids=[1], completion_tokens=1)] for c in conversations]


def test_limits_and_clients_that_hang_up_leave_the_server_batching(serve_app):
    """Over real HTTP (uvicorn): requests over the limits are 413 / 422; clients that hang up while
    their request waits behind a running batch are dropped from the queue (the engine never
    generates for them) and half-sent bodies hold nothing; the next wave still runs as one batch and
    the server stays healthy. Without the drop the engine generated for all 8 abandoned prompts."""
    import json
    import socket
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlparse

    import httpx

    from factrl.llm.serve import RequestLimits

    llm = SlowEcho(delay=1.5)
    url = serve_app(create_app(llm, window_ms=200, limits=RequestLimits(max_body_bytes=4096, max_n=2, max_tokens=16)))
    base = url.removesuffix("/v1")
    host, port = urlparse(url).hostname, urlparse(url).port

    def ask(content: str, **extra) -> httpx.Response:
        return httpx.post(f"{url}/chat/completions", timeout=30,
                          json={"model": "echo", "messages": [{"role": "user", "content": content}], **extra})

    assert ask("x" * 5000).status_code == 413
    assert ask("n", n=3).status_code == 422 and "n:" in ask("n", n=3).json()["detail"]
    assert ask("t", max_tokens=17).status_code == 422
    llm.prompts.clear()

    def send_and_hang_up(content: str, half: bool) -> None:
        body = json.dumps({"model": "echo", "messages": [{"role": "user", "content": content}]}).encode()
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(head + (body[: len(body) // 2] if half else body))

    busy = threading.Thread(target=ask, args=("busy",))
    busy.start()  # the engine is busy with it for 1.5 s; what arrives meanwhile queues
    time.sleep(0.5)
    for i in range(8):
        send_and_hang_up(f"gone {i}", half=False)
        send_and_hang_up(f"half {i}", half=True)
    busy.join()
    with ThreadPoolExecutor(8) as pool:
        wave = list(pool.map(lambda i: ask(f"next {i}"), range(8)))
    assert [r.json()["choices"][0]["message"]["content"] for r in wave] == [f"next {i}" for i in range(8)]
    health = httpx.get(f"{base}/health", timeout=10).json()
    assert not [p for p in llm.prompts if p.startswith(("gone", "half"))], llm.prompts
    assert health["dropped"] == 8 and health["status"] == "ok", health
    assert health["batches"] < 1 + 8, health  # the wave of 8 batched (1 call for "busy", then fewer than 8)
