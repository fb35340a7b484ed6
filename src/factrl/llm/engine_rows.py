"""One row of the in-process engine (:mod:`factrl.llm.local`): a request, how it grows token by token
and when it stops, and the memo that lets identical greedy requests share one decode.

Everything here is per row and knows nothing of the batch: the engine decides which rows run
together and where their key/value states live; a :class:`GenerationRequest` only takes the tokens
the engine picked for it (:meth:`GenerationRequest.advance`), says when it is finished (EOS, a stop
string, its token budget) and becomes a :class:`~factrl.llm.base.Completion`
(:meth:`GenerationRequest.finish`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from factrl.llm.base import Completion, SamplingParams
from factrl.llm.token_sampling import sample_tokens
from factrl.llm.tokens import decode_completion

# Greedy answers kept by a GreedyMemo, oldest dropped first: an engine that is never released (a
# server) must not grow without bound; a training step's search agent asks a few hundred questions.
MEMO_ENTRIES = 4096


@functools.cache  # called for every generated token with the request's (hashable) stop tuple
def stop_window(stop: Sequence[str]) -> int:
    """Tokens to decode when looking for a stop string that the newest token may complete.

    Every non-special token decodes to at least one UTF-8 byte, so a stop string of ``k`` bytes
    spans at most ``k`` tokens; one more covers a token that starts mid-character.
    """
    return max((len(s.encode()) for s in stop), default=0) + 2


@dataclass
class GenerationRequest:
    """One row in the step-level engine: its prompt, sampling, sampler and output so far (the
    sampled ids, an ending EOS included, and the engine's log-prob of each, with the log-probs of
    ``params.watch_ids`` at each position when asked for). ``completion`` is set when the row finishes."""

    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    out: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    watched: list[list[float]] = field(default_factory=list)
    finish_reason: str = "length"
    ended_by_eos: bool = False
    completion: Completion | None = None
    followers: list[GenerationRequest] = field(default_factory=list)  # identical greedy requests it answers

    @property
    def done(self) -> bool:
        return self.completion is not None

    def sample(self, logits: torch.Tensor, argmax: int | None) -> int:
        """This row's next token from its logits ``[V]``: ``argmax`` (precomputed for the whole
        batch) when greedy, else a sample from the row's own sampler."""
        if self.params.greedy and argmax is not None:
            return int(argmax)
        return int(sample_tokens(logits[None], self.params, self.generator)[0])

    def advance(self, tok: int, logprob: float, watched: list[float] | None, *, eos_ids, tokenizer) -> bool:
        """Append the row's sampled token, its log-prob (and the watched ids' log-probs at its
        position, when the request asked for them); return whether the row is finished (EOS, a stop
        string or the token budget). An EOS is kept: it is the token the policy sampled, and
        training teaches the policy to stop with it.

        Stop strings are searched in the decoded tail of the output only (a window covering the
        longest stop string), so the per-token cost does not grow with the output length; the text
        before the tail was already searched at earlier steps.
        """
        self.out.append(tok)
        self.logprobs.append(logprob)
        if watched is not None:
            self.watched.append(watched)
        if tok in eos_ids and not self.params.ignore_eos:
            self.finish_reason, self.ended_by_eos = "stop", True
            return True
        if self.params.stop:
            tail = tokenizer.decode(self.out[-stop_window(self.params.stop):], skip_special_tokens=True)
            if any(s and s in tail for s in self.params.stop):
                self.finish_reason = "stop"
                return True
        return len(self.out) >= self.params.max_tokens

    def finish(self, tokenizer) -> list[GenerationRequest]:
        """Set the completion (this row's and its followers'); returns the followers, now done."""
        self.completion = decode_completion(
            tokenizer, self.out, self.finish_reason, self.params, ended_by_eos=self.ended_by_eos,
            prompt_tokens=len(self.prompt), logprobs=self.logprobs,
            watched_logprobs=self.watched if self.params.watch_ids else None)
        followers, self.followers = self.followers, []
        for follower in followers:
            follower.completion = dataclasses.replace(self.completion)
        return followers

    def answer(self, follower: GenerationRequest) -> None:
        """Give ``follower`` (an identical greedy request) this row's completion: now if it is done,
        else when it finishes."""
        if self.completion is not None:
            follower.completion = dataclasses.replace(self.completion)
        else:
            self.followers.append(follower)


class GreedyMemo:
    """The first greedy request of each (prompt, sampling settings), which answers every identical
    one submitted after it. Greedy decoding is a function of the prompt and the weights, so sharing
    changes no output; the engine clears the memo whenever the weights change. Bounded to
    ``max_entries`` (oldest first out)."""

    def __init__(self, max_entries: int = MEMO_ENTRIES):
        self.max_entries = max_entries
        self._leaders: dict[tuple, GenerationRequest] = {}

    def leader(self, request: GenerationRequest) -> GenerationRequest:
        """The request that answers ``request``: an earlier identical one, or ``request`` itself
        (then remembered as the leader of its key)."""
        leader = self._leaders.setdefault((tuple(request.prompt), request.params), request)
        if len(self._leaders) > self.max_entries:
            del self._leaders[next(iter(self._leaders))]
        return leader

    def clear(self) -> None:
        self._leaders.clear()

    def __len__(self) -> int:
        return len(self._leaders)
