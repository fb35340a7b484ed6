"""Planted defects: named, deliberate bugs in what a GRPO run learns from, for ablations.

A reinforcement-learning pipeline whose advantages, rewards or loss masks were wrong would still run,
log curves and write checkpoints. These defects make such a regression observable: the learning
benchmark (``bench/learning.py``) trains with each one planted and reports the gain over the warm
start, and ``tests/rl/test_defects.py`` checks on a tiny policy that the flipped sign moves the reward
the other way. A sound pipeline gains; one trained on a flipped sign or shuffled rewards must not.

Each defect wraps a run's ``(rollout_fn, reward_fn)`` pair (:func:`plant`), so neither the trainer nor
the agents know about it:

* ``flip_advantage``: every score the trainer receives is negated. GRPO's advantage is a score minus
  its group's mean (divided by the group's std, or not), so negating the scores flips every advantage's
  sign exactly; the policy is pushed away from what the reward prefers.
* ``shuffled_reward``: the scores of one draw's rollouts are permuted at random across the draw's
  prompts and rollouts (seeded), so an advantage no longer belongs to the rollout that earned it.
* ``mask_retrieved_tokens_off``: every response token gets loss mask 1, so the tool results injected
  into a response (retrieved passages, the search agent's reports) are trained on as if the policy had
  written them; the paper masks them (HARIS section 3, "retrieved tokens masked").

Each wrapped result keeps its true score in ``parts["unplanted_reward"]`` (reported in the step's
curve row as ``unplanted_reward_rate``), so a run with a planted defect still logs what the policy
actually earned.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any

RolloutFn = Callable[[list[Any], int], list[Any]]
RewardFn = Callable[[list[Any], list[Any]], list[Any]]


def _score(result: Any) -> float:
    """A reward function's result (a plain float, or a dataclass with ``score`` and ``parts`` such as
    ``factrl.rewards.registry.RewardResult``) as its score."""
    return float(result) if isinstance(result, (int, float)) else float(result.score)


def _with_score(result: Any, score: float) -> Any:
    """``result`` with ``score`` as what the trainer sees and its true score kept in its parts (a
    plain float result has no parts: it becomes ``score``)."""
    if isinstance(result, (int, float)):
        return float(score)
    return dataclasses.replace(result, score=float(score),
                               parts={**result.parts, "unplanted_reward": float(result.score)})


def flip_scores(results: Sequence[Any]) -> list[Any]:
    """``[n]`` results -> the same results with every score negated (advantage sign flipped)."""
    return [_with_score(r, -_score(r)) for r in results]


def shuffle_scores(results: Sequence[Any], rng: random.Random) -> list[Any]:
    """``[n]`` results -> the same results with their scores permuted across all ``n`` by ``rng``."""
    scores = [_score(r) for r in results]
    rng.shuffle(scores)
    return [_with_score(r, s) for r, s in zip(results, scores)]


def unmask(trajectory: Any) -> Any:
    """A trajectory whose every response token is trained on (loss mask all 1)."""
    return dataclasses.replace(trajectory, loss_mask=[1] * len(trajectory.response_ids))


def _keep_score(results: Sequence[Any]) -> list[Any]:
    return [_with_score(r, _score(r)) for r in results]


# name -> what it does to a run; "" plants nothing
PLANTED_DEFECTS: dict[str, str] = {
    "flip_advantage": "scores negated before the update: every advantage's sign flipped",
    "shuffled_reward": "scores permuted across a draw's rollouts: advantages no longer match rollouts",
    "mask_retrieved_tokens_off": "tool results inside a response trained on (loss mask 1 everywhere)",
}


def plant(name: str, rollout_fn: RolloutFn, reward_fn: RewardFn, seed: int = 0) -> tuple[RolloutFn, RewardFn]:
    """The ``(rollout_fn, reward_fn)`` pair with defect ``name`` planted (``""``: returned unchanged).

    Shuffles draw from one ``random.Random(seed)`` for the run: a resumed run reshuffles differently
    from an uninterrupted one, which an ablation's figure does not depend on.
    """
    if not name:
        return rollout_fn, reward_fn
    if name not in PLANTED_DEFECTS:
        raise ValueError(f"unknown planted defect {name!r}: one of {', '.join(PLANTED_DEFECTS)} (or empty)")
    if name == "mask_retrieved_tokens_off":
        def unmasked_rollouts(items: list[Any], group: int) -> list[Any]:
            return [unmask(t) for t in rollout_fn(items, group)]

        def kept_rewards(items: list[Any], trajectories: list[Any]) -> list[Any]:
            return _keep_score(reward_fn(items, trajectories))

        return unmasked_rollouts, kept_rewards
    rng = random.Random(seed)

    def planted_rewards(items: list[Any], trajectories: list[Any]) -> list[Any]:
        results = reward_fn(items, trajectories)
        return flip_scores(results) if name == "flip_advantage" else shuffle_scores(results, rng)

    return rollout_fn, planted_rewards
