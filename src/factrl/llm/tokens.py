"""Token ids in, completions out: the one conversion every token-level engine goes through.

The agent loops continue token-id prompts and read back a :class:`~factrl.llm.base.Completion`
(generated ids, their text, why generation ended). Three engines produce the ids:

* factrl's in-process engine (:class:`~factrl.llm.local.LocalLLM`);
* a vLLM-style server: ``POST /v1/completions`` with a token-id prompt and ``return_token_ids``
  (``vllm serve``, ``factrl serve-llm``), whose ids end with the EOS id when the model stopped;
* verl's rollout servers (``generate(prompt_ids, sampling_params) -> TokenOutput``), vLLM or
  SGLang underneath, the same.

Whatever the engine, a completion follows the same rules (:func:`decode_completion`): ``token_ids``
are the ids as sampled, an ending EOS included (the very id sampled, so a model with several EOS
ids, Qwen3's, trains on the one it chose; the rollout keeps it with mask 1, see
``factrl.agents.rollout``), ``text`` is the ids before that EOS decoded without special tokens and
cut after the first stop string, and ``finish_reason`` is ``stop`` (EOS or a stop string) or
``length``. ``logprobs``, where the engine returns them, are the sampled ids' log-probs.
:func:`vllm_sampling` writes :class:`~factrl.llm.base.SamplingParams` in vLLM's request vocabulary
(what verl's servers and vLLM's HTTP API read), so the three paths also sample alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from factrl.llm.base import Completion, Message, SamplingParams


def encode_chat(tokenizer, messages: Sequence[Message]) -> list[int]:
    """Token ids of a conversation rendered by the tokenizer's chat template, ready to continue
    (the assistant's turn opened). Every engine's prompts are built here, so the local loop and
    verl's agent loops start from the same ids."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def eos_token_ids(tokenizer, generation_config: Any = None) -> set[int]:
    """The ids that end generation: the tokenizer's EOS and the model's ``generation_config``
    ones (Qwen3 has several)."""
    ids: set[int] = set()
    for src in (tokenizer.eos_token_id, getattr(generation_config, "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif src:
            ids.update(int(i) for i in src)
    return ids


def trim_at_stop(text: str, stop: Sequence[str], include_stop: bool) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop string; return ``(text, stopped)``."""
    best: tuple[int, str] | None = None
    for s in stop:
        if not s:
            continue
        i = text.find(s)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, s)
    if best is None:
        return text, False
    i, s = best
    return (text[: i + len(s)] if include_stop else text[:i]), True


def decode_completion(tokenizer, ids: Sequence[int], finish_reason: str, params: SamplingParams, *,
                      ended_by_eos: bool = False, prompt_tokens: int = 0,
                      logprobs: Sequence[float] | None = None,
                      watched_logprobs: Sequence[Sequence[float]] | None = None) -> Completion:
    """The completion of generated ``ids`` that ended for ``finish_reason``; with ``ended_by_eos`` the
    last id is the EOS the engine sampled: kept in ``token_ids`` (trained as sampled), left out of the
    text. A stop string found in the text makes it ``stop`` whatever the engine said.
    ``watched_logprobs``: per id, the log-probs of ``params.watch_ids`` (None: not asked for)."""
    ids = [int(i) for i in ids]
    text = tokenizer.decode(ids[:-1] if ended_by_eos else ids, skip_special_tokens=True)
    if params.stop:
        text, stopped = trim_at_stop(text, params.stop, params.include_stop)
        finish_reason = "stop" if stopped else finish_reason
    return Completion(text=text, token_ids=ids, finish_reason=finish_reason, prompt_tokens=prompt_tokens,
                      completion_tokens=len(ids), logprobs=None if logprobs is None else [float(x) for x in logprobs],
                      watched_logprobs=None if watched_logprobs is None else [list(map(float, w)) for w in watched_logprobs])


def completion_from_ids(tokenizer, ids: Iterable[int], params: SamplingParams, *, eos_ids: set[int],
                        prompt_tokens: int = 0, logprobs: Sequence[float] | None = None) -> Completion:
    """The completion of an engine that returns the ids it sampled (vLLM, verl's ``TokenOutput``):
    a final EOS id means ``stop`` (the id stays, see the module docstring), as does a stop string in
    the text; anything else hit the token budget (``length``)."""
    ids = [int(i) for i in ids]
    ended = bool(ids) and ids[-1] in eos_ids and not params.ignore_eos
    return decode_completion(tokenizer, ids, "stop" if ended else "length", params, ended_by_eos=ended,
                             prompt_tokens=prompt_tokens, logprobs=logprobs)


def vllm_sampling(params: SamplingParams) -> dict[str, Any]:
    """``params`` as vLLM's sampling fields (verl's ``generate`` and vLLM's HTTP API read these):
    stop strings kept in the output so the rollout sees the closing tag, special tokens skipped in
    the text as the local engine does."""
    out: dict[str, Any] = {
        "max_tokens": int(params.max_tokens), "temperature": float(params.temperature), "top_p": float(params.top_p),
        "include_stop_str_in_output": bool(params.include_stop), "skip_special_tokens": True,
        "ignore_eos": bool(params.ignore_eos),
    }
    if params.stop:
        out["stop"] = list(params.stop)
    if params.seed is not None:
        out["seed"] = int(params.seed)
    return out
