"""Skipping prompts whose groups will be all-equal, before rolling them out (GRESO, arXiv 2506.02177).

A group whose rewards are all equal has every advantage 0: its rollouts cost a step's time and teach
nothing (dynamic sampling drops such groups *after* paying for them). GRESO's observation is that a
prompt that gave an all-equal group the last times it was drawn tends to give one again, so it is
skipped *before* its rollouts with probability ``1 - p ** z``: ``z`` the number of its latest draws in
a row that gave an all-equal group, ``p`` an exploration probability, one for prompts whose groups
were all right (``easy``: uniform at a reward of at least 0.5) and one for all wrong (``hard``). Each
step moves each ``p`` by 0.01 (within [0.05, 0.95]) toward a target share of all-equal groups among
the step's groups: ``target_uniform / 3`` of easy ones and ``2 * target_uniform / 3`` of hard ones
(hard prompts are explored more: as the policy improves they are the ones that change), as GRESO's
``all_probabilistic`` filter does.

A skipped prompt's place in the draw goes to another prompt not drawn in the step yet, so a step
rolls out as many groups as without skipping, fewer of them uniform. Decisions are seeded by
``(seed, step, draw)`` and the state (:meth:`PromptSkipper.state_dict`) rides in the trainer's
checkpoint, so a resumed run skips what an unbroken one does. An approximate lever (the policy never
sees the skipped prompts while they are skipped): a param to ablate, off by default.

Prompts are only drawn again in a later epoch, so the filter has nothing to act on in a round
shorter than an epoch of its prompts (the demo's 4 steps of 8 claims): it pays on long runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

EASY, HARD, MIXED = "easy", "hard", "mixed"
EXPLORE_STEP, EXPLORE_MIN, EXPLORE_MAX = 0.01, 0.05, 0.95  # GRESO's adjustment and its bounds


def group_outcome(scores: Sequence[float]) -> str:
    """``mixed`` when the group's rewards differ (exactly, as ``sampling.mixed_groups`` and
    ``advantages.uniform_group_rate`` tell them apart), else ``easy`` (all at least 0.5) or ``hard``."""
    if max(scores) != min(scores):
        return MIXED
    return EASY if scores[0] >= 0.5 else HARD


def uniform_streak(outcomes: Sequence[str]) -> tuple[str, int]:
    """The latest outcome and how many of the latest outcomes in a row were uniform (0 if mixed)."""
    if not outcomes:
        return MIXED, 0
    z = 0
    for outcome in reversed(outcomes):
        if outcome == MIXED:
            break
        z += 1
    return outcomes[-1], z


@dataclass
class PromptSkipper:
    """GRESO's pre-rollout filter (see the module doc): per prompt, the outcomes of its groups so
    far; the two exploration probabilities; the target share of all-equal groups."""

    target_uniform: float = 0.25
    p_easy: float = 0.5
    p_hard: float = 0.5
    history: dict[int, list[str]] = field(default_factory=dict)

    def skip_probability(self, prompt: int) -> float:
        last, z = uniform_streak(self.history.get(prompt, []))
        if z == 0:
            return 0.0
        return 1.0 - (self.p_easy if last == EASY else self.p_hard) ** z

    def choose(self, candidates: Sequence[int], size: int, rng: np.random.Generator) -> tuple[list[int], int]:
        """The first ``size`` of ``candidates`` (in order) that a coin of :meth:`skip_probability` keeps
        -> (chosen, how many were skipped). When fewer survive, the skipped ones fill the rest in order
        (a step never rolls out fewer prompts than asked)."""
        chosen: list[int] = []
        skipped: list[int] = []
        for prompt in candidates:
            if len(chosen) == size:
                break
            (skipped if rng.random() < self.skip_probability(prompt) else chosen).append(prompt)
        n_skipped = len(skipped)
        chosen += skipped[: size - len(chosen)]
        return chosen, n_skipped

    def record(self, prompts: Sequence[int], scores: Sequence[float], group_size: int) -> None:
        """Append each prompt's group outcome (``scores`` item-major, ``group_size`` per prompt) and move
        the exploration probabilities toward the targets, as GRESO does once it has a history to act on."""
        outcomes = [group_outcome(scores[k * group_size:(k + 1) * group_size]) for k in range(len(prompts))]
        acting = any(p in self.history for p in prompts)
        for prompt, outcome in zip(prompts, outcomes):
            self.history.setdefault(int(prompt), []).append(outcome)
        if not acting or not outcomes:
            return
        easy = outcomes.count(EASY) / len(outcomes)
        hard = outcomes.count(HARD) / len(outcomes)
        self.p_easy = _toward(self.p_easy, easy >= self.target_uniform / 3)
        self.p_hard = _toward(self.p_hard, hard >= 2 * self.target_uniform / 3)

    def state_dict(self) -> dict:
        return {"p_easy": self.p_easy, "p_hard": self.p_hard, "history": {k: list(v) for k, v in self.history.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.p_easy, self.p_hard = float(state["p_easy"]), float(state["p_hard"])
        self.history = {int(k): list(v) for k, v in state["history"].items()}


def _toward(p: float, too_many_uniform: bool) -> float:
    """Skip more (lower ``p``) when the step had at least its target of such groups, else less."""
    if too_many_uniform:
        return max(p - EXPLORE_STEP, EXPLORE_MIN)
    return min(p + EXPLORE_STEP, EXPLORE_MAX)
