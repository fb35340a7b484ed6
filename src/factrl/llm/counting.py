"""A pass-through LLM that counts the requests and tokens reaching its backend.

Stages put it directly around a backend, under the disk cache (``CachedLLM(CountingLLM(llm))``), so
its counts are the calls actually paid for: what a resumed run repeats, what a debate costs against
one agent. It keeps the backend's tokenizer visible, so token-level agent loops still run.
"""

from __future__ import annotations

import threading

from factrl.llm.base import Completion, SamplingParams, call_each

TOKEN_ACCESS = ("tokenizer", "encode_chat")  # what token-level rollouts need of a backend


def expose_tokens(wrapper, inner) -> None:
    """Give ``wrapper`` the ``inner`` backend's tokenizer and chat encoder where it has them: a
    wrapper without them would turn token-level rollouts (exact loss masks, the ``<think>`` prefix)
    into chat ones."""
    for name in TOKEN_ACCESS:
        if hasattr(inner, name):
            setattr(wrapper, name, getattr(inner, name))


class CountingLLM:
    """Counts ``calls`` (requests that reached ``inner``, one per conversation or prompt) and tokens."""

    def __init__(self, inner):
        self.inner = inner
        self.model_name = inner.model_name
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._lock = threading.Lock()
        expose_tokens(self, inner)

    def _count(self, comps: list[Completion], prompt_tokens: int | None = None) -> None:
        with self._lock:
            self.calls += 1
            # a request's prompt is counted once, whatever its n
            if prompt_tokens is None:
                prompt_tokens = comps[0].prompt_tokens if comps else 0
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += sum(c.completion_tokens for c in comps)

    def chat(self, conversations, params: SamplingParams, on_result=None) -> list[list[Completion]]:
        """Counts each request that reached the backend, also when a later one of the batch fails."""

        def count(i: int, comps: list[Completion]) -> None:
            self._count(comps)
            if on_result is not None:
                on_result(i, comps)

        return call_each(self.inner.chat, conversations, params, count)

    def complete_tokens(self, prompts, params: SamplingParams) -> list[list[Completion]]:
        out = self.inner.complete_tokens(prompts, params)
        for prompt, comps in zip(prompts, out):
            self._count(comps, len(prompt))
        return out
