"""``factrl serve-llm``: an OpenAI-compatible server around :class:`LocalLLM`, the local stand-in
for ``vllm serve``.

``POST /v1/chat/completions`` (messages) and ``POST /v1/completions`` with token-id prompts and
vLLM's extensions (``return_token_ids``, ``include_stop_str_in_output``, ``ignore_eos``), the
request a token-level client (:class:`~factrl.llm.openai_compat.OpenAICompatLLM` with a tokenizer)
sends to vLLM too: its generated ids come back as vLLM returns them, a final EOS included.

Concurrent requests are batched: the first request to arrive opens a short collection window
(a few ms), everything that arrives in it with the same sampling params runs as one left-padded
batch, and each caller gets its own slice back. Batching is what makes 16 concurrent agents
about as fast over HTTP as one in-process batched call. A caller that hangs up while its request
waits for a batch is dropped from the queue (its slot goes to the next request, no tokens are
generated for it); ``GET /health`` counts the batches run, the requests they served and those dropped.

Binds 127.0.0.1 unless told otherwise. Bound to any other address it refuses to start unless the
environment variable ``FACTRL_LLM_TOKEN`` holds a token, and then every ``/v1`` request must carry
it as ``Authorization: Bearer <token>``: what an OpenAI client sends as its API key, so a client
points ``api_key_env`` at the same variable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from factrl.llm.base import Completion, SamplingParams
from factrl.servers import UnsafeBind, answer_invalid_bodies_cleanly, free_port, required_token, spawn

DEFAULT_HOST = "127.0.0.1"  # loopback only unless asked otherwise
TOKEN_ENV = "FACTRL_LLM_TOKEN"  # the bearer token of a server bound beyond loopback


@contextlib.contextmanager
def spawn_server(model: str, *, precision: str = "auto", device: str = "auto", timeout: float = 300.0
                 ) -> Iterator[str]:
    """Run ``factrl serve-llm`` for ``model`` (on ``device``) on a free loopback port in a subprocess;
    yield its ``/v1`` base URL once ``/v1/models`` answers; stop the server when the block ends."""
    port = free_port()
    cmd = [sys.executable, "-m", "factrl.cli", "serve-llm", "--model", model, "--served-model-name", model,
           "--port", str(port), "--host", DEFAULT_HOST, "--precision", precision, "--device", str(device)]
    url = f"http://{DEFAULT_HOST}:{port}/v1"
    with spawn(cmd, f"{url}/models", timeout=timeout, name="factrl serve-llm"):
        yield url


@dataclass(frozen=True)
class RequestLimits:
    """Bounds of one request, so that one caller cannot make the server buffer a huge body or
    generate for minutes: a body over ``max_body_bytes`` is answered 413, an ``n`` or a
    ``max_tokens`` above these 422 (both naming the limit)."""

    max_body_bytes: int = 8 * 1024 * 1024
    max_n: int = 64
    max_tokens: int = 8192


class RequestError(ValueError):
    """A request field the server cannot honour (answered 422 with this message)."""


class Batcher:
    """Collect requests for ``window_ms`` then run each group of one kind (``chat``: messages;
    ``tokens``: prompt ids) and equal params as one batch."""

    def __init__(self, llm, window_ms: float = 5.0, max_batch: int = 64):
        self.llm = llm
        self.window = window_ms / 1000
        self.max_batch = max_batch
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self.batches = 0  # model calls run
        self.requests = 0  # prompts they answered
        self.dropped = 0  # prompts whose caller had gone before their batch ran (never generated)

    async def submit(self, prompt: list, params: SamplingParams, kind: str = "chat") -> list[Completion]:
        if self._worker is None:  # started lazily, inside the server's event loop
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run())
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put((prompt, (kind, params), fut))
        return await fut

    async def _run(self) -> None:
        while True:
            pending = [await self._queue.get()]
            deadline = time.monotonic() + self.window
            while len(pending) < self.max_batch:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    pending.append(await asyncio.wait_for(self._queue.get(), timeout))
                except TimeoutError:
                    break
            # requests queued while the model is busy are picked up right after this batch; a caller
            # that has gone (its future cancelled by answer_unless_gone) takes no slot in it
            live = [item for item in pending if not item[2].done()]
            self.dropped += len(pending) - len(live)
            for (kind, params), group in _group_by_params(live).items():
                await self._run_group(kind, params, group)

    async def _run_group(self, kind: str, params: SamplingParams, group: list) -> None:
        call = self.llm.chat if kind == "chat" else self.llm.complete_tokens
        self.batches += 1
        self.requests += len(group)
        try:
            results = await asyncio.to_thread(call, [m for m, _, _ in group], params)
        except Exception as exc:  # noqa: BLE001 - handed to every waiting request
            for _, _, fut in group:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, _, fut), comps in zip(group, results):
            if not fut.done():  # the client may have gone away
                fut.set_result(comps)


async def answer_unless_gone(receive, work):
    """Await ``work`` (a coroutine) unless the client goes first: ``receive`` (the request's ASGI
    receive, its body already read) returns ``http.disconnect`` when the client hangs up; then
    ``work`` is cancelled (a request still queued in the :class:`Batcher` is dropped from it) and
    None returned."""
    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if task.done():
        return task.result()
    task.cancel()
    return None


def _group_by_params(pending: list) -> dict[tuple[str, SamplingParams], list]:
    groups: dict[tuple[str, SamplingParams], list] = {}
    for item in pending:
        groups.setdefault(item[1], []).append(item)
    return groups


def _number(body: dict, field: str, default, kind: type, low: float, high: float):
    """``body[field]`` (``default`` when absent or null) as ``kind`` within ``[low, high]``, else a
    RequestError naming the field."""
    value = body.get(field)
    if value is None:
        return default
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or (kind is int and value != int(value))):
        raise RequestError(f"{field}: expected {'an integer' if kind is int else 'a number'}, got {value!r:.60}")
    if not low <= value <= high:
        raise RequestError(f"{field}: {value} is outside [{low}, {high}]")
    return kind(value)


def params_from_request(body: dict, limits: RequestLimits = RequestLimits()) -> SamplingParams:
    """OpenAI request fields -> SamplingParams (stop strings are stripped later, OpenAI-style);
    a field of the wrong type or out of range is a :class:`RequestError` naming it."""
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 16:
        raise RequestError(f"stop: expected a string or at most 16 non-empty strings, got {stop!r:.60}")
    field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise RequestError(f"seed: expected a non-negative integer, got {seed!r:.60}")
    return SamplingParams(
        max_tokens=_number(body, field, min(256, limits.max_tokens), int, 1, limits.max_tokens),
        temperature=_number(body, "temperature", 1.0, float, 0.0, 100.0),
        top_p=_number(body, "top_p", 1.0, float, 1e-9, 1.0),
        n=_number(body, "n", 1, int, 1, limits.max_n),
        stop=tuple(stop),
        include_stop=True,  # kept so that the matched string can be reported as stop_reason
        seed=seed,
        ignore_eos=bool(body.get("ignore_eos", False)),  # vLLM's extension, same meaning
    )


def _choice(index: int, comp: Completion, stop: Sequence[str]) -> dict:
    text, stop_reason = comp.text, None
    for s in stop:
        if comp.finish_reason == "stop" and text.endswith(s):
            text, stop_reason = text[: -len(s)], s
            break
    return {
        "index": index,
        "message": {"role": "assistant", "content": text},
        "finish_reason": comp.finish_reason,
        "stop_reason": stop_reason,  # vLLM's extension: which stop string matched
    }


def _completion_choice(index: int, comp: Completion, body: dict, stop: Sequence[str]) -> dict:
    """A ``/v1/completions`` choice as vLLM writes it: the stop string kept in the text only with
    ``include_stop_str_in_output``; with ``return_token_ids``, the generated ids, a final EOS included."""
    choice = _choice(index, comp, stop)
    text = comp.text if body.get("include_stop_str_in_output") else choice["message"]["content"]
    out = {"index": index, "text": text, "finish_reason": comp.finish_reason, "stop_reason": choice["stop_reason"]}
    if body.get("return_token_ids"):
        out["token_ids"] = list(comp.token_ids or [])
    return out


def _is_ids(prompt) -> bool:
    return (isinstance(prompt, list) and bool(prompt)
            and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in prompt))


def _token_prompts(prompt) -> list[list[int]]:
    """The ``prompt`` of a completions request as token-id lists (this server takes ids only)."""
    if _is_ids(prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(_is_ids(p) for p in prompt):
        return prompt
    raise RequestError("prompt: must be a list of token ids (or a list of such lists)")


def _chat_messages(messages) -> list[dict]:
    """The ``messages`` of a chat request as ``{role, content}`` with string contents."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: must be a non-empty list of {role, content}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}]: must be an object with a string role")
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            raise RequestError(f"messages[{i}].content: must be a string (content parts are not supported)")
        out.append({"role": m["role"], "content": content or ""})
    return out


def create_app(llm, window_ms: float = 5.0, max_batch: int = 64, token: str | None = None,
               limits: RequestLimits = RequestLimits()):
    """The FastAPI app serving ``llm`` (any :class:`~factrl.llm.base.LLM`) under ``/v1``; every
    request needs ``Bearer <token>`` when ``token`` is set; requests are bounded by ``limits``."""
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse, Response

    from factrl.servers import BodyLimit, bearer_dependency

    app = FastAPI(title="factrl serve-llm", dependencies=[Depends(bearer_dependency(token))])
    answer_invalid_bodies_cleanly(app)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, setting="--max-body-bytes")

    @app.exception_handler(RequestError)
    async def bad_request(request: Request, exc: RequestError):
        return JSONResponse({"detail": str(exc)}, 422)
    batcher = Batcher(llm, window_ms=window_ms, max_batch=max_batch)
    app.state.batcher = batcher
    gone = Response(status_code=499)  # nginx's "client closed request": no one reads it

    @app.get("/health")
    async def health():
        """Liveness and the batching counters (behind the token like everything else)."""
        return {"status": "ok", "batches": batcher.batches, "requests": batcher.requests,
                "dropped": batcher.dropped}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": llm.model_name, "object": "model", "owned_by": "factrl"}]}

    async def chat_completions(body: dict, request: Request):
        messages = _chat_messages(body.get("messages"))
        if body.get("stream"):
            raise HTTPException(400, "streaming is not supported")
        params = params_from_request(body, limits)
        comps = await answer_unless_gone(request.receive, batcher.submit(messages, params))
        if comps is None:
            return gone
        prompt_tokens = comps[0].prompt_tokens if comps else 0
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": llm.model_name,
            "choices": [_choice(i, c, params.stop) for i, c in enumerate(comps)],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": sum(c.completion_tokens for c in comps),
                "total_tokens": prompt_tokens + sum(c.completion_tokens for c in comps),
            },
        }

    async def completions(body: dict, request: Request):
        if body.get("stream"):
            raise HTTPException(400, "streaming is not supported")
        prompts = _token_prompts(body.get("prompt"))
        if len(prompts) > limits.max_n:
            raise RequestError(f"prompt: {len(prompts)} prompts in one request; at most {limits.max_n}")
        params = params_from_request(body, limits)
        results = await answer_unless_gone(
            request.receive, asyncio.gather(*(batcher.submit(p, params, kind="tokens") for p in prompts)))
        if results is None:
            return gone
        choices = [_completion_choice(i * params.n + j, c, body, params.stop)
                   for i, comps in enumerate(results) for j, c in enumerate(comps)]
        prompt_tokens = sum(len(p) for p in prompts)
        completion_tokens = sum(c.completion_tokens for comps in results for c in comps)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": llm.model_name, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    # this module's annotations are strings (PEP 563) and Request is imported in this function, where
    # FastAPI cannot resolve it: the real class makes ``request`` the request, not a query field
    for handler, path in ((chat_completions, "/v1/chat/completions"), (completions, "/v1/completions")):
        handler.__annotations__["request"] = Request
        app.post(path)(handler)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``factrl serve-llm``."""
    import uvicorn

    from factrl.hardware import PRECISIONS
    from factrl.llm.local import LocalLLM
    from factrl.llm.models import DEFAULT_POLICY

    ap = argparse.ArgumentParser(prog="factrl serve-llm", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_POLICY, help="embedded name, HF directory or hub id")
    ap.add_argument("--served-model-name", default=None)
    ap.add_argument("--host", default=DEFAULT_HOST,
                    help=f"bind address (loopback unless told otherwise; any other address needs ${TOKEN_ENV})")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--precision", choices=PRECISIONS, default="auto",
                    help="engine weights: auto = bf16 only where the CPU computes it natively (see factrl.hardware)")
    ap.add_argument("--device", default="auto", help="auto (CUDA when visible, else CPU), cpu, cuda or cuda:N")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--window-ms", type=float, default=5.0, help="how long to collect a batch")
    ap.add_argument("--max-body-bytes", type=int, default=RequestLimits.max_body_bytes,
                    help="larger request bodies are answered 413")
    ap.add_argument("--max-n", type=int, default=RequestLimits.max_n, help="most completions per request")
    ap.add_argument("--max-tokens", type=int, default=RequestLimits.max_tokens, help="most tokens per completion")
    args = ap.parse_args(argv)
    try:  # before loading the model: refusing should be instant
        token = required_token(args.host, TOKEN_ENV, "factrl serve-llm")
    except UnsafeBind as err:
        raise SystemExit(str(err)) from None
    llm = LocalLLM(args.model, precision=args.precision, max_batch=args.max_batch, model_name=args.served_model_name,
                   device=args.device)
    limits = RequestLimits(args.max_body_bytes, args.max_n, args.max_tokens)
    uvicorn.run(create_app(llm, args.window_ms, args.max_batch, token, limits), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
