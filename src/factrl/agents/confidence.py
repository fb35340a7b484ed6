"""A verifier run's raw confidence: how sure the model was of the verdict word it wrote.

A reasoning agent ends with ``<verification>\\boxed{Support}</verification>`` (or ``Refute``). The
verdict is decided by one token: the first token of the word after ``\\boxed{``. The engine reports,
at every generated position, the log-probs of a few watched token ids
(``SamplingParams.watch_ids``; :class:`VerdictWatch` picks them: the first tokens of the verdict
words in the spellings a model writes); at the decision position (:func:`verdict_position`) the
raw confidence is the probability mass of the emitted verdict's tokens normalised over both
verdicts' tokens::

    raw = sum(p(t) for t in tokens of the emitted verdict) / sum(p(t) for t in all watched tokens)

so it is the model's own P(emitted verdict | it writes a verdict here), in [0, 1] (at the sampling
temperature, 1 when greedy). Watching costs nothing measurable: the engine gathers a few columns of
the log-softmax it computes anyway (``bench``-style timing in docs/results.md).

Fallbacks, in order (:func:`verdict_confidence` returns the value and which one applied):

* ``verdict_tokens``: the normalised probability above;
* ``chosen_token``: an engine that returns only the sampled ids' log-probs (no watched ids): the
  probability of the token it chose at the decision position (a lower bound of the normalised one);
* ``uninformative``: no token probabilities at all (a chat-only endpoint) or no decision position
  found: 0.5, so a calibration map fitted on such runs returns the dev accuracy;
* ``no_verdict``: the run wrote no valid verdict, which scores as wrong: 0.0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from factrl.agents.protocol import REFUTES, SUPPORTS

# what the prompts teach, and the variants a small model writes after "\boxed{"; only a word's
# first token is watched: it decides the verdict ("Ref" + "ute" / "uted" are both REFUTES)
VERDICT_SPELLINGS: dict[str, tuple[str, ...]] = {
    SUPPORTS: ("Support", " Support", "support", " support"),
    REFUTES: ("Refute", " Refute", "refute", " refute"),
}
_BOX_OPEN = "\\boxed{"
# the text right before the decision token: "\boxed{" (spaces and a \text{ allowed, as the parser)
_DECISION_RE = re.compile(r"\\boxed\s*\{\s*(?:\\text\s*\{\s*)?$")
_LOOKBACK = 8  # tokens decoded before a position to recognise "\boxed{" (it is 3-4 tokens)

SOURCES = ("verdict_tokens", "chosen_token", "uninformative", "no_verdict")


@dataclass(frozen=True)
class VerdictWatch:
    """The token ids to watch (``ids``) and the verdict each stands for (``verdicts``, same order)."""

    ids: tuple[int, ...]
    verdicts: tuple[str, ...]

    @classmethod
    def for_tokenizer(cls, tokenizer) -> VerdictWatch:
        """The first token of every spelling of :data:`VERDICT_SPELLINGS` as the tokenizer splits
        it after ``\\boxed{``; a spelling whose first token merges with the brace, or is shared by
        both verdicts, is left out (it cannot tell them apart)."""
        head = tokenizer(_BOX_OPEN, add_special_tokens=False)["input_ids"]
        first: dict[int, set[str]] = {}
        for verdict, spellings in VERDICT_SPELLINGS.items():
            for word in spellings:
                ids = tokenizer(_BOX_OPEN + word, add_special_tokens=False)["input_ids"]
                if len(ids) > len(head) and ids[: len(head)] == head:
                    first.setdefault(ids[len(head)], set()).add(verdict)
        kept = [(tok, next(iter(v))) for tok, v in first.items() if len(v) == 1]
        return cls(tuple(t for t, _ in kept), tuple(v for _, v in kept))

    @property
    def usable(self) -> bool:
        """Both verdicts have at least one watched token."""
        return {SUPPORTS, REFUTES} <= set(self.verdicts)


def verdict_position(response_ids: list[int], loss_mask: list[int], tokenizer) -> int | None:
    """The index in ``response_ids`` of the last generated token (mask 1) that follows
    ``\\boxed{``: where the model chose its verdict word; None when there is none."""
    for j in range(len(response_ids) - 1, 0, -1):
        if not loss_mask[j]:
            continue
        before = tokenizer.decode(response_ids[max(0, j - _LOOKBACK) : j], skip_special_tokens=True)
        if _DECISION_RE.search(before):
            return j
    return None


def verdict_confidence(trajectory, verdict: str | None, tokenizer, watch: VerdictWatch | None
                       ) -> tuple[float, str]:
    """``(raw confidence in [0, 1], source)`` of a run that emitted ``verdict`` (see the module
    docstring for the sources). ``trajectory``: a :class:`~factrl.agents.rollout.Trajectory`."""
    if verdict is None:
        return 0.0, "no_verdict"
    if tokenizer is None or not trajectory.response_ids:
        return 0.5, "uninformative"
    pos = verdict_position(trajectory.response_ids, trajectory.loss_mask, tokenizer)
    if pos is None:
        return 0.5, "uninformative"
    watched = trajectory.response_watched_logprobs
    if watch is not None and watch.usable and watched is not None and watched[pos] is not None:
        probs = [math.exp(lp) for lp in watched[pos]]
        total = sum(probs)
        if total > 0:
            mine = sum(p for p, v in zip(probs, watch.verdicts) if v == verdict)
            return min(1.0, max(0.0, mine / total)), "verdict_tokens"
    if trajectory.response_logprobs is not None:
        return min(1.0, math.exp(trajectory.response_logprobs[pos])), "chosen_token"
    return 0.5, "uninformative"
