"""Bad input, property-based: request bodies of ``factrl serve-llm`` (chat and token-id completions).
Any JSON, any bytes, any size: a 200, or a 4xx whose detail names what is wrong (413 for a body over
the limit, 400/422 otherwise); never a 500, and the server answers a good request afterwards."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from factrl.llm.base import Completion
from factrl.llm.serve import RequestLimits, create_app
from tests.fuzz import json_values, tried

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = RequestLimits(max_body_bytes=64_000, max_n=4, max_tokens=64)
GOOD = {"model": "echo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
FIELDS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop",
          "seed", "ignore_eos", "stream", "return_token_ids", "include_stop_str_in_output"]


class EchoLLM:
    """Answers every chat and token prompt; fails loudly on anything a real engine would choke on."""

    model_name = "echo"

    def chat(self, conversations, params):
        for conv in conversations:
            assert all(isinstance(m["role"], str) and isinstance(m["content"], str) for m in conv), conv
        assert 1 <= params.n <= LIMITS.max_n and 1 <= params.max_tokens <= LIMITS.max_tokens, params
        return [[Completion("echo", [1], "stop", prompt_tokens=1, completion_tokens=1)] * params.n
                for _ in conversations]

    def complete_tokens(self, prompts, params):
        assert all(isinstance(t, int) and 0 <= t < 2**31 for p in prompts for t in p), prompts
        assert 1 <= params.n <= LIMITS.max_n and 1 <= params.max_tokens <= LIMITS.max_tokens, params
        return [[Completion("echo", [1], "stop", prompt_tokens=len(p), completion_tokens=1)] * params.n
                for p in prompts]


# entered once: one event loop for the module, as under uvicorn (the batcher's worker lives in it)
CLIENT = TestClient(create_app(EchoLLM(), window_ms=0.0, limits=LIMITS), raise_server_exceptions=False).__enter__()

messages = st.one_of(json_values, st.lists(st.one_of(
    json_values, st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"])},
                                       optional={"content": json_values})), max_size=3))
bodies = st.fixed_dictionaries({}, optional={f: (messages if f == "messages" else json_values) for f in FIELDS})


def check(path: str, content: bytes) -> None:
    answer = CLIENT.post(path, content=content, headers={"content-type": "application/json"})
    assert answer.status_code in (200, 400, 413, 422), (answer.status_code, content[:300], answer.text[:300])
    if answer.status_code != 200:
        assert answer.json()["detail"], answer.text


@FUZZ
@given(body=bodies, path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]))
@example(body={"max_tokens": float("inf")}, path="/v1/chat/completions")  # a validation error echoing Infinity
@example(body={"temperature": float("nan")}, path="/v1/completions")
def test_any_json_body_gets_a_clean_answer(body, path):
    tried(f"serve_llm.{path.removeprefix('/v1/')}")
    check(path, json.dumps({**GOOD, **body}).encode())


@FUZZ
@given(raw=st.binary(max_size=200))
def test_any_bytes_get_a_clean_answer(raw):
    tried("serve_llm.raw_bytes")
    check("/v1/chat/completions", raw)


def test_limits_answer_413_and_422_and_the_server_still_answers():
    huge = json.dumps({**GOOD, "messages": [{"role": "user", "content": "x" * 100_000}]}).encode()
    assert CLIENT.post("/v1/chat/completions", content=huge).status_code == 413
    for field, value in (("n", 5), ("max_tokens", 65), ("max_tokens", 0), ("temperature", -1), ("n", "two")):
        answer = CLIENT.post("/v1/chat/completions", json={**GOOD, field: value})
        assert answer.status_code == 422 and field in answer.json()["detail"], (field, answer.text)
    assert CLIENT.post("/v1/chat/completions", json=GOOD).json()["choices"][0]["message"]["content"] == "echo"
