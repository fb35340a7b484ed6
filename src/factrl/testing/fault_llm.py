"""A fault-injecting OpenAI-compatible server for tests and benchmarks: the one copy every test of a
model over HTTP uses (the client's retries, the teacher, the secrets test, bench/reliability.py).

``FaultyOpenAI(plan)`` is a real FastAPI app (serve it with ``factrl.testing.servers.running_app``) whose
``POST /v1/chat/completions`` answers each request by ``plan(content, attempt)``: ``content`` is the
last message's text, ``attempt`` counts the requests with that content so far (1 = first), and the
plan names one of :data:`FAULTS` or ``None`` for a proper answer. A ``proxy`` app can be given
instead of ``reply``: proper answers are then forwarded to it (a real ``factrl serve-llm`` app).

It records what a test needs to prove nothing was lost, duplicated or leaked: ``attempts`` per
content, ``requests`` in all, ``faults`` by kind, and every ``Authorization`` header seen; per whole
request body (``body_key``: the same conversation and sampling, whatever else shares its last
message) the requests and the faults, whose difference :meth:`FaultyOpenAI.duplicated` counts.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

Plan = Callable[[str, int], "str | None"]


def echo_reply(body: dict, k: int) -> str:
    """The default answer, choice ``k``: ``echo <last message> #k``."""
    return f"echo {body['messages'][-1]['content']} #{k}"


def completion_body(body: dict, texts: list[str]) -> dict:
    """An OpenAI ``chat.completion`` object with one choice per text."""
    choices = [{"index": k, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
               for k, t in enumerate(texts)]
    return {"id": "c", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
            "choices": choices, "usage": {"prompt_tokens": 3, "completion_tokens": 2 * len(texts),
                                          "total_tokens": 3 + 2 * len(texts)}}


async def _dropped(_body: dict) -> Response:
    async def stream():
        yield b'{"id": "c", "object": "chat.completion", "choi'
        raise ConnectionResetError("fault: connection dropped mid-response")

    # the headers promise JSON, the body stops half way and the connection closes
    return StreamingResponse(stream(), media_type="application/json")


def _truncated(body: dict) -> Response:
    full = json.dumps(completion_body(body, [echo_reply(body, 0)]))
    return Response(full[: len(full) // 2], media_type="application/json")


# fault name -> function(body) -> the response (or a coroutine of it) that replaces the proper answer
FAULTS: dict[str, Callable] = {
    "rate_limit": lambda body: JSONResponse({"error": {"message": "slow down"}}, 429, headers={"Retry-After": "1"}),
    "server_error": lambda body: JSONResponse({"error": {"message": "boom"}}, 500),
    "unavailable": lambda body: JSONResponse({"error": {"message": "overloaded"}}, 503),
    "bad_json": lambda body: Response("{not json", media_type="application/json"),
    "truncated_json": _truncated,
    "wrong_choices": lambda body: JSONResponse(completion_body(body, ["a", "b"] * body.get("n", 1))),
    "no_choices": lambda body: JSONResponse(completion_body(body, [])),
    "dropped": _dropped,
    "timeout": None,  # handled in the app: sleeps past the client's timeout, then answers
}


class FaultyOpenAI:
    """See the module docstring. ``timeout_sleep``: how long a ``timeout`` fault stalls (longer
    than the client's timeout)."""

    def __init__(self, plan: Plan = lambda content, attempt: None, reply: Callable[[dict, int], str] = echo_reply,
                 proxy: FastAPI | None = None, timeout_sleep: float = 8.0) -> None:
        self.plan, self.reply, self.proxy, self.timeout_sleep = plan, reply, proxy, timeout_sleep
        self.attempts: collections.Counter[str] = collections.Counter()
        self.faults: collections.Counter[str] = collections.Counter()
        self.requests = 0
        self.auth: set[str | None] = set()
        self.body_requests: collections.Counter[str] = collections.Counter()
        self.body_faults: collections.Counter[str] = collections.Counter()
        self.app = self._build()

    def duplicated(self) -> int:
        """Requests beyond one answered request per distinct body (a faulty answer is retried: not a
        duplicate): a record sent again after it was answered."""
        return sum(max(0, n - 1 - self.body_faults[k]) for k, n in self.body_requests.items())

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            raw = await request.body()
            body = json.loads(raw)
            self.auth.add(request.headers.get("authorization"))
            content = body["messages"][-1]["content"]
            self.attempts[content] += 1
            self.requests += 1
            key = body_key(body)
            self.body_requests[key] += 1
            fault = self.plan(content, self.attempts[content])
            if fault is not None:
                self.faults[fault] += 1
                self.body_faults[key] += 1
                if fault == "timeout":
                    await asyncio.sleep(self.timeout_sleep)
                else:
                    response = FAULTS[fault](body)
                    return await response if asyncio.iscoroutine(response) else response
            if self.proxy is not None:
                return await self._forward(raw)
            return completion_body(body, [self.reply(body, k) for k in range(body.get("n", 1))])

        return app

    async def _forward(self, raw: bytes) -> Response:
        import httpx

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.proxy), base_url="http://inner") as client:
            resp = await client.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        return Response(resp.content, resp.status_code, media_type="application/json")


def body_key(body: dict) -> str:
    """A request body's identity: its conversation and sampling fields."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def first_attempt_fails_by_hash(kinds: list[str | None]) -> Plan:
    """A plan for requests with no item number in them: the first attempt of a content fails by
    ``kinds[sha256(content) % len(kinds)]``; every later attempt is answered."""
    def plan(content: str, attempt: int) -> str | None:
        return kinds[int(hashlib.sha256(content.encode()).hexdigest()[:8], 16) % len(kinds)] if attempt == 1 else None

    return plan


def first_attempt_fails(kinds: list[str | None], item_of: Callable[[str], int]) -> Plan:
    """A plan: the first attempt of item ``i`` (``item_of(content)``) fails by ``kinds[i % len(kinds)]``
    (``None``: no fault); every later attempt is answered."""
    def plan(content: str, attempt: int) -> str | None:
        return kinds[item_of(content) % len(kinds)] if attempt == 1 else None

    return plan
