"""The one protocol every LLM backend implements (OpenAI-compatible HTTP, local transformers).

Agents, the teacher, the judge and the baselines only see :class:`LLM`. Two entry points:

* ``chat``: batched chat completions (messages in, text out), what teachers and judges use.
* ``complete_tokens``: batched raw continuation of token-id prompts, what the multi-turn rollout
  engine uses so that it can build exact loss masks over the model's own tokenization.
  A backend without token access (a hosted API) raises :class:`TokensUnsupported`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypedDict, runtime_checkable


class Message(TypedDict):
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` means greedy.

    stop: generation ends at the first of these strings; the stop string is kept in the text
    (the rollout engine needs the closing tag) when ``include_stop`` is true.
    seed: makes sampled calls reproducible (and cacheable).
    ignore_eos: keep generating past end-of-sequence until ``max_tokens`` (vLLM's option of the
        same name; benchmarks use it to compare engines on an exact token count).
    watch_ids: token ids whose log-probs the engine also reports at every generated position
        (:attr:`Completion.watched_logprobs`), e.g. the first tokens of the verdict words, from
        which HARIS reads a confidence at the position where it wrote its verdict. Engines that
        cannot (HTTP backends) ignore it; empty (the default) costs nothing.
    """

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    n: int = 1
    stop: tuple[str, ...] = ()
    include_stop: bool = True
    seed: int | None = None
    ignore_eos: bool = False
    watch_ids: tuple[int, ...] = ()

    @property
    def greedy(self) -> bool:
        """Argmax decoding (a temperature of 0 or below)."""
        return self.temperature <= 0


@dataclass
class Completion:
    """One sampled continuation.

    token_ids: every token id the backend sampled, where it exposes them, including the EOS that
        ended the continuation (as vLLM returns it; a model may have several EOS ids, e.g. Qwen3's
        ``<|im_end|>`` and ``<|endoftext|>``, so no other id may stand in for it). ``text`` leaves
        the EOS out.
    logprobs: the backend's log-prob of each of ``token_ids`` under the distribution it sampled
        from (temperature applied, before top-p), where it exposes them; a trainer compares them
        with its own to measure and correct the engine/trainer mismatch.
    watched_logprobs: per id of ``token_ids``, the log-probs of ``SamplingParams.watch_ids`` (in that
        order) under the same distribution, where the request asked for them and the engine can.
    """

    text: str
    token_ids: list[int] | None = None
    finish_reason: str = "stop"  # "stop" (EOS or stop string) | "length"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    extra: dict = field(default_factory=dict)
    logprobs: list[float] | None = None
    watched_logprobs: list[list[float]] | None = None


class TokensUnsupported(NotImplementedError):  # noqa: N818 - reads as a sentence at the raise site
    """The backend cannot continue raw token-id prompts (e.g. a hosted chat-only API)."""


@runtime_checkable
class LLM(Protocol):
    """A batched LLM. Results are returned in input order: one list of ``n`` completions per input."""

    model_name: str

    def chat(self, conversations: Sequence[Sequence[Message]], params: SamplingParams) -> list[list[Completion]]:
        ...

    def complete_tokens(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        ...


OnResult = Callable[[int, list[Completion]], None]


def streams_results(call: Callable) -> bool:
    """Whether a backend call reports each request as it finishes (an ``on_result`` parameter):
    HTTP backends do, so a batch that fails half-way still hands over its finished answers."""
    try:
        return "on_result" in inspect.signature(call).parameters
    except (TypeError, ValueError):
        return False


def call_each(call: Callable, items: list, params: SamplingParams, on_result: OnResult) -> list[list[Completion]]:
    """``call(items, params)`` with ``on_result(i, completions)`` for every request: as each one
    finishes when the backend streams results, else for all of them once the batch returned."""
    if streams_results(call):
        return call(items, params, on_result=on_result)
    out = call(items, params)
    for i, comps in enumerate(out):
        on_result(i, comps)
    return out
