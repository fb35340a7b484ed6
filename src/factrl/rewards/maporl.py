"""MAPoRL's verifier-shaped rewards for multi-agent, multi-turn collaboration (appendix F, G).

A verifier scores each agent's answer at each turn: ``V[t, a]`` in [0, 1] (the estimated probability
that the final answer is correct), and -10 for answers the appendix penalises (no ``\\boxed{}``,
text after the box, a short phrase repeated more than three times in a row, too few tokens).
Three ways to turn these scores into the reward of agent ``a``'s answer at turn ``t``:

- immediate:  ``V[t, a]``
- cumulative: ``sum_{t'>=t} g^(t'-t) V[t', a] / sum_{t'>=t} g^(t'-t)``
- influence-aware: ``(V[t, a] + sum_{t'>t} g^(t'-t) mean_j V[t', j]) / sum_{t'>=t} g^(t'-t)``

(``g`` = gamma, 1 in the paper's runs.) Each function takes the whole ``[T, A]`` score matrix and
returns the ``[T, A]`` reward matrix.
"""

from __future__ import annotations

import re

import numpy as np

from factrl.rewards.m2r import boxed_spans
from factrl.rewards.registry import register

PENALTY = -10.0
MIN_TOKENS = 50
_REPEAT = re.compile(r"(\b\S+(?:\s+\S+){1,4}?)(?:\s+\1){3,}")  # a 2-5 token phrase, 4+ times in a row


def _scores(verifier: np.ndarray | list[list[float]]) -> np.ndarray:
    v = np.asarray(verifier, dtype=np.float64)
    if v.ndim != 2 or v.size == 0:
        raise ValueError(f"verifier scores must be a non-empty [turns, agents] matrix, got shape {v.shape}")
    return v


def _discounts(n: int, gamma: float) -> np.ndarray:
    """``[n, n]`` upper-triangular matrix ``D[t, t'] = gamma^(t'-t)`` for ``t' >= t``, else 0."""
    t = np.arange(n)
    lag = t[None, :] - t[:, None]
    return np.where(lag >= 0, float(gamma) ** np.clip(lag, 0, None), 0.0)


@register("maporl_immediate")
def immediate_reward(verifier) -> np.ndarray:
    """``[T, A] -> [T, A]``: the verifier's score of the answer itself."""
    return _scores(verifier).copy()


@register("maporl_cumulative")
def cumulative_reward(verifier, gamma: float = 1.0) -> np.ndarray:
    """``[T, A] -> [T, A]``: discounted mean of the agent's own scores from turn t to the last turn."""
    v = _scores(verifier)
    d = _discounts(v.shape[0], gamma)
    return (d @ v) / d.sum(axis=1, keepdims=True)


@register("maporl_influence")
def influence_aware_reward(verifier, gamma: float = 1.0) -> np.ndarray:
    """``[T, A] -> [T, A]``: own score now plus the discounted mean score of all agents later on."""
    v = _scores(verifier)
    d = _discounts(v.shape[0], gamma)
    future = d - np.eye(v.shape[0])  # t' > t only
    team = v.mean(axis=1, keepdims=True)  # [T, 1]
    return (v + future @ team) / d.sum(axis=1, keepdims=True)


def penalized_score(verifier_score: float, answer: str, *, min_tokens: int = MIN_TOKENS) -> float:
    """The appendix's reward-hacking guards applied to one verifier score (-10 when any fires)."""
    spans = boxed_spans(answer)
    if not spans:
        return PENALTY
    if answer[spans[-1][1] :].strip(" \t\n$.)]"):  # anything but closing math/punctuation after the box
        return PENALTY
    if len(answer.split()) < min_tokens:
        return PENALTY
    for m in _REPEAT.finditer(answer):
        if not re.fullmatch(r"[\d\s.,]+", m.group(1)):  # numbers may legitimately repeat
            return PENALTY
    return float(verifier_score)
