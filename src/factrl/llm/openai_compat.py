"""OpenAI-compatible HTTP backend (OpenAI, ``vllm serve``, ``factrl serve-llm``) on ``openai``.

Two entry points, as the :class:`~factrl.llm.base.LLM` protocol asks: ``chat`` (``/v1/chat/completions``)
and, when the client knows the served model's tokenizer, ``complete_tokens``: a token-id prompt to
``/v1/completions`` with vLLM's ``return_token_ids`` (vLLM and ``factrl serve-llm`` both answer it),
so agent rollouts over HTTP continue exactly the ids an in-process engine would (same masks, same
greedy outputs). Without a tokenizer, or against a server that returns no ids (OpenAI itself), it
raises :class:`~factrl.llm.base.TokensUnsupported` and the rollouts run as chats.

Requests of one batch go out concurrently under a semaphore. Retries are one mechanism,
:meth:`OpenAICompatLLM._with_retries` (the ``openai`` client's own loop is off): exponential backoff
with full jitter on 429, 5xx, timeouts, connection errors and unparseable bodies, waiting at least
``Retry-After`` when the server sends it. It is written here because the client's loop cannot:

- retry a 200 whose body is not the completion we asked for (a proxy's truncated JSON, fewer
  choices than ``n``): the client raises ``JSONDecodeError`` / ``APIResponseValidationError``
  without retrying (with its loop on instead of this one, the fault-injection test fails on them);
- take the backoff as settings (its 0.5 s -> 8 s schedule is module constants) or spread a batch's
  32 concurrent retries with full jitter (it jitters by 0-25% only, so they return in a herd);
- count retries into :class:`Usage`, or honour a ``Retry-After`` above two minutes (it gives up).

The key comes from a parameter or an environment variable (name configurable) and is held only by
the ``openai`` client: it is never logged, cached or repr'd.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import openai

from factrl.llm.base import Completion, Message, SamplingParams, TokensUnsupported
from factrl.llm.tokens import completion_from_ids, encode_chat, eos_token_ids, vllm_sampling

log = logging.getLogger(__name__)


@dataclass
class Usage:
    """Running token and cost totals over every successful request."""

    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


def _retry_after(exc: Exception) -> float | None:
    """Seconds the server asked us to wait, from a ``Retry-After`` header (delta-seconds form)."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _is_transient(exc: Exception) -> bool:
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code in (408, 409, 429)
    # a 200 whose body is not the JSON we expect (a proxy hiccup): the request is safe to resend
    return isinstance(exc, (json.JSONDecodeError, openai.APIResponseValidationError, ValueError))


class OpenAICompatLLM:
    """The :class:`~factrl.llm.base.LLM` protocol over an OpenAI-compatible chat endpoint."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 16,
        max_retries: int = 8,
        timeout: float = 120.0,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        price_per_mtok: tuple[float, float] = (0.0, 0.0),  # USD per 1M (prompt, completion) tokens
        tokenizer=None,  # the served model's tokenizer: enables complete_tokens (token-level rollouts)
    ):
        self.model_name = model
        self.tokenizer = tokenizer
        self.eos_ids = eos_token_ids(tokenizer) if tokenizer is not None else set()
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        # local servers (vllm, factrl serve-llm) accept any key; the client refuses an empty one
        key = api_key or os.environ.get(api_key_env) or "EMPTY"
        # max_retries=0: _with_retries is the one retry loop (the module docstring says why)
        self._client_args = dict(base_url=self.base_url, api_key=key, timeout=timeout, max_retries=0)
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.price_per_mtok = price_per_mtok
        self.usage = Usage()
        self._usage_lock = threading.Lock()

    def __repr__(self) -> str:  # the key stays out of reprs and therefore out of logs
        return f"OpenAICompatLLM(model={self.model_name!r}, base_url={self.base_url!r})"

    # ---- protocol -------------------------------------------------------------------------
    def chat(self, conversations: Sequence[Sequence[Message]], params: SamplingParams,
             on_result: Callable[[int, list[Completion]], None] | None = None) -> list[list[Completion]]:
        return _run_sync(self.achat(conversations, params, on_result))

    def complete_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                        on_result: Callable[[int, list[Completion]], None] | None = None) -> list[list[Completion]]:
        if self.tokenizer is None:
            raise TokensUnsupported(f"{self!r} has no tokenizer for the served model, so it runs chats only")
        return _run_sync(self._gather([list(p) for p in prompts], params, on_result, self._complete_request))

    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        """The served model's prompt ids for a conversation (needs the tokenizer)."""
        if self.tokenizer is None:
            raise TokensUnsupported(f"{self!r} has no tokenizer for the served model")
        return encode_chat(self.tokenizer, messages)

    async def achat(
        self, conversations: Sequence[Sequence[Message]], params: SamplingParams,
        on_result: Callable[[int, list[Completion]], None] | None = None,
    ) -> list[list[Completion]]:
        """Send every conversation (at most ``concurrency`` in flight); results in input order.

        ``on_result(i, completions)`` runs as soon as request ``i`` succeeds, so a caller (the
        disk cache) keeps every answer that arrived even when another request of the batch fails.
        A failure is raised only after every request has finished or failed.
        """
        return await self._gather([list(c) for c in conversations], params, on_result, self._request)

    async def _gather(self, items: list, params: SamplingParams, on_result, request) -> list[list[Completion]]:
        """``request(client, item, params)`` for every item, at most ``concurrency`` in flight."""
        client = openai.AsyncOpenAI(**self._client_args)
        sem = asyncio.Semaphore(self.concurrency)

        async def one(i: int, item):
            async with sem:
                comps = await self._with_retries(client, item, params, request)
            if on_result is not None:
                on_result(i, comps)
            return comps

        try:
            out = await asyncio.gather(*(one(i, item) for i, item in enumerate(items)), return_exceptions=True)
        finally:
            await client.close()
        for r in out:
            if isinstance(r, BaseException):
                raise r
        return list(out)

    # ---- internals ------------------------------------------------------------------------
    async def _with_retries(self, client, item, params: SamplingParams, request) -> list[Completion]:
        for attempt in range(self.max_retries + 1):
            try:
                return await request(client, item, params)
            except Exception as exc:  # noqa: BLE001 - classified right below
                if not _is_transient(exc) or attempt == self.max_retries:
                    raise
                delay = random.uniform(0, min(self.backoff_max, self.backoff_base * 2**attempt))
                delay = max(delay, _retry_after(exc) or 0.0)
                with self._usage_lock:
                    self.usage.retries += 1
                # only the exception type: messages can echo request headers
                log.warning("LLM request failed (%s); retry %d in %.2fs", type(exc).__name__, attempt + 1, delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _request(self, client, messages, params: SamplingParams) -> list[Completion]:
        kwargs = dict(
            model=self.model_name, messages=messages, max_tokens=params.max_tokens,
            temperature=params.temperature, top_p=params.top_p, n=params.n,
        )
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if params.seed is not None:
            kwargs["seed"] = params.seed
        if params.ignore_eos:  # not an OpenAI field; vLLM and our server read it from the body
            kwargs["extra_body"] = {"ignore_eos": True}
        resp = await client.chat.completions.create(**kwargs)
        if not resp.choices or len(resp.choices) != params.n:
            raise ValueError(f"expected {params.n} choices, got {len(resp.choices or [])}")
        prompt_tokens = resp.usage.prompt_tokens if resp.usage else 0
        completion_tokens = resp.usage.completion_tokens if resp.usage else 0
        self._account(prompt_tokens, completion_tokens)
        choices = sorted(resp.choices, key=lambda c: c.index)
        return [self._completion(c, params, prompt_tokens, completion_tokens // params.n) for c in choices]

    async def _complete_request(self, client, prompt_ids: list[int], params: SamplingParams) -> list[Completion]:
        """One token-id prompt through ``/v1/completions``, the generated ids asked back."""
        body = vllm_sampling(params)
        standard = {k: body.pop(k) for k in ("max_tokens", "temperature", "top_p", "stop", "seed") if k in body}
        resp = await client.completions.create(model=self.model_name, prompt=prompt_ids, n=params.n,
                                               extra_body={**body, "return_token_ids": True}, **standard)
        if not resp.choices or len(resp.choices) != params.n:
            raise ValueError(f"expected {params.n} choices, got {len(resp.choices or [])}")
        choices = sorted(resp.choices, key=lambda c: c.index)
        ids = [getattr(c, "token_ids", None) or (c.model_extra or {}).get("token_ids") for c in choices]
        if any(i is None for i in ids):
            raise TokensUnsupported(f"{self!r}: the server returned no token_ids (not a vLLM-style endpoint)")
        self._account(resp.usage.prompt_tokens if resp.usage else len(prompt_ids),
                      resp.usage.completion_tokens if resp.usage else sum(map(len, ids)))
        return [completion_from_ids(self.tokenizer, i, params, eos_ids=self.eos_ids, prompt_tokens=len(prompt_ids))
                for i in ids]

    def _account(self, prompt_tokens: int, completion_tokens: int) -> None:
        p_in, p_out = self.price_per_mtok
        with self._usage_lock:
            self.usage.requests += 1
            self.usage.prompt_tokens += prompt_tokens
            self.usage.completion_tokens += completion_tokens
            self.usage.cost_usd += (prompt_tokens * p_in + completion_tokens * p_out) / 1e6

    @staticmethod
    def _completion(choice, params: SamplingParams, prompt_tokens: int, completion_tokens: int) -> Completion:
        text = choice.message.content or ""
        finish = "length" if choice.finish_reason == "length" else "stop"
        if params.include_stop and params.stop and finish == "stop":
            # OpenAI strips the matched stop string; vLLM reports which one matched as stop_reason
            matched = getattr(choice, "stop_reason", None)
            if not isinstance(matched, str) and len(params.stop) == 1:
                matched = params.stop[0]
            if isinstance(matched, str) and matched in params.stop and not text.endswith(matched):
                text += matched
        return Completion(
            text=text, finish_reason=finish, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )


def _run_sync(coro):
    """Run a coroutine from sync code, even when the caller already sits inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict = {}

    def target():
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
