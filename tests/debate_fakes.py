"""A scripted, chat-only LLM for SC-MAKS tests: it answers every prompt the pool sends (HARIS, the
single agent, RAG, Decompose-Then-Verify, debate turns, summaries) with a verdict chosen by a
policy, records what it was asked, and can die after a number of requests."""

from __future__ import annotations

import contextlib
import json
import re
import threading

from factrl.agents import debate
from factrl.llm.base import Completion

GARBLE = "I am not sure what to say."


class Killed(RuntimeError):
    """The fake backend died."""


def claim_of(conversation) -> str:
    """The claim a prompt is about (every pool prompt states it as ``Claim: ...``)."""
    m = re.search(r"Claim: (.*)", conversation[-1]["content"])
    return m.group(1).strip() if m else ""


class DebateFake:
    """``policy(claim, kind) -> "Support" | "Refute" | None`` (None: a malformed reply; ``"loose:Refute"``:
    a malformed reply that still boxes a verdict; ``""``: an empty reply), where kind
    is ``open`` (generation phase) or the debate role. ``die_after``: raise :class:`Killed` on the
    batched call that would pass that many requests (a batch is all or nothing)."""

    def __init__(self, policy, name: str = "fake", die_after: int | None = None, peer: str = "Ben"):
        self.policy = policy
        self.model_name = name
        self.die_after = die_after
        self.peer = peer
        self.seen: list[str] = []  # every conversation answered, as canonical JSON
        self.batches: list[tuple[str, int]] = []  # (kind, size) of every call
        self._lock = threading.Lock()

    def _kind(self, conversation) -> str:
        system = conversation[0]["content"]
        for role, text in debate.ROLE_INSTRUCTIONS.items():
            if text in system:
                return role
        if system.startswith(debate.SUMMARY_SYSTEM.split("{")[0]):
            return "summary"
        if system.startswith("Split a claim"):
            return "decompose"
        if "Verdict: Support" in system:
            return "verify"
        return "open"

    def _reply(self, conversation) -> str:
        kind = self._kind(conversation)
        if kind == "summary":
            return "Everyone argued; see [P1]."
        if kind == "decompose":
            return f"- {claim_of(conversation)}"
        verdict = self.policy(claim_of(conversation), "open" if kind in ("verify", "open") else kind)
        if verdict is None:
            return GARBLE
        if verdict == "":  # the model stopped at once
            return ""
        if verdict.startswith("loose:"):  # a verdict inside a malformed answer (text outside the tags)
            return f"Well. <verification>\\boxed{{{verdict[6:]}}}</verification>"
        if kind == "verify":
            return f"Verdict: {verdict}"
        if kind == "open":
            return (f"<think>I read the claim. Then I weighed every passage about its subject, its founder, its "
                    f"place and its dates, one after the other, and kept what they say.</think>\n"
                    f"<verification>\\boxed{{{verdict}}}</verification>")
        return (f"<think>{self.peer} is wrong; [P1] says otherwise, I agree with the passage.</think>\n"
                f"<verification>\\boxed{{{verdict}}}</verification>")

    def chat(self, conversations, params):
        with self._lock:
            if self.die_after is not None and len(self.seen) + len(conversations) > self.die_after:
                raise Killed(f"{self.model_name} died")
            self.seen += [json.dumps(c, sort_keys=True) for c in conversations]
            self.batches.append((self._kind(conversations[0]) if conversations else "none", len(conversations)))
        return [[Completion(self._reply(c), prompt_tokens=8, completion_tokens=8)] for c in conversations]

    def complete_tokens(self, prompts, params):
        raise NotImplementedError  # chat only: the agent loops fall back to chat


def loader_of(fakes: dict[str, DebateFake]):
    """A ``scmaks.open_pool`` loader serving ``fakes[model]`` for a member's model."""

    @contextlib.contextmanager
    def load(model, spec):
        yield fakes[model]

    return load


def by_label(labels: dict[str, str], wrong: bool = False):
    """A policy that gives the gold verdict of a claim (or its opposite)."""
    flip = {"Support": "Refute", "Refute": "Support"}

    def policy(claim, kind):
        v = "Support" if labels[claim] == "SUPPORTS" else "Refute"
        return flip[v] if wrong else v

    return policy
