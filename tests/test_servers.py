"""The bind rule of every factrl server (factrl.servers): loopback needs no token; any other address
without a token in the environment refuses to start (the real commands, in subprocesses, before
loading a model or an index); with one, requests without ``Bearer <token>`` get 401."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from factrl.llm.base import Completion
from factrl.servers import UnsafeBind, required_token, token_matches


def test_required_token_on_and_off_loopback():
    for host in ("127.0.0.1", "localhost", "::1"):
        assert required_token(host, "T", "cmd", {}) is None
    with pytest.raises(UnsafeBind, match="cmd: binding 0.0.0.0 .* set the environment variable T"):
        required_token("0.0.0.0", "T", "cmd", {})
    with pytest.raises(UnsafeBind):
        required_token("10.0.0.5", "T", "cmd", {"T": "   "})
    assert required_token("0.0.0.0", "T", "cmd", {"T": "s3cret"}) == "s3cret"
    assert token_matches("Bearer s3cret", "s3cret") and token_matches("bearer  s3cret ", "s3cret")
    assert not token_matches("Bearer s3cre", "s3cret") and not token_matches("s3cret", "s3cret")
    assert not token_matches("", "s3cret") and not token_matches("Basic s3cret", "s3cret")


@pytest.mark.parametrize(("command", "token_env"), [
    (["serve-retriever", "--index", "nowhere", "--mode", "bm25"], "FACTRL_RETRIEVER_TOKEN"),
    (["serve-llm", "--model", "nowhere"], "FACTRL_LLM_TOKEN"),
])
def test_commands_bound_beyond_loopback_refuse_to_start_without_a_token(command, token_env):
    env = {k: v for k, v in os.environ.items() if k not in ("FACTRL_RETRIEVER_TOKEN", "FACTRL_LLM_TOKEN")}
    done = subprocess.run([sys.executable, "-m", "factrl.cli", *command, "--host", "0.0.0.0", "--port", "1"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"set the environment variable {token_env}" in done.stderr
    assert "Traceback" not in done.stderr  # refused before the missing index/model is even looked at


class EchoLLM:
    model_name = "echo"

    def chat(self, conversations, params):
        return [[Completion(f"echo {c[-1]['content']}", prompt_tokens=1, completion_tokens=1)] for c in conversations]


def test_serve_llm_with_a_token_answers_only_bearers():
    from factrl.llm.serve import create_app

    client = TestClient(create_app(EchoLLM(), token="tok-123"))
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert client.post("/v1/chat/completions", json=body).status_code == 401
    assert client.get("/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
    ok = client.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer tok-123"})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "echo hi"
    # without a token (loopback) nothing is asked
    assert TestClient(create_app(EchoLLM())).post("/v1/chat/completions", json=body).status_code == 200


class OneHitRetriever:
    """The part of a Retriever the app uses."""

    mode, manifest = "bm25", {}

    def __len__(self):
        return 1

    def search(self, queries, k):
        from factrl.retrieval.index import Hit

        return [[Hit("p0", "T", f"about {q}", 1.0)] for q in queries]


def test_serve_retriever_with_a_token_answers_only_bearers_and_the_client_sends_it(monkeypatch):
    from factrl.retrieval.client import RetrievalClient
    from factrl.retrieval.server import create_app

    with TestClient(create_app(OneHitRetriever(), token="tok-456")) as client:
        assert client.get("/health").status_code == 200  # liveness stays open
        assert client.post("/retrieve", json={"queries": ["q"]}).status_code == 401
        monkeypatch.setenv("FACTRL_RETRIEVER_TOKEN", "tok-456")
        sent = dict(RetrievalClient("http://unused").http.headers)  # what RetrievalClient sends
        answer = client.post("/retrieve", json={"queries": ["q"], "topk": 1}, headers=sent)
        assert answer.status_code == 200 and answer.json()["result"][0][0]["id"] == "p0"
        monkeypatch.delenv("FACTRL_RETRIEVER_TOKEN")
        assert "authorization" not in RetrievalClient("http://unused").http.headers
