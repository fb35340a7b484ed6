"""MAPoRL's verifier-shaped rewards for multi-agent, multi-turn collaboration (appendix F, G).

A verifier scores each agent's answer at each turn: ``V[t, a]`` in [0, 1] (the estimated probability
that the final answer is correct), and -10 for answers the appendix penalises (no ``\\boxed{}``,
text after the box, a short phrase repeated more than three times in a row, too few tokens).
Three ways to turn these scores into the reward of agent ``a``'s answer at turn ``t``:

- immediate:  ``V[t, a]``
- cumulative: ``sum_{t'>=t} g^(t'-t) V[t', a] / sum_{t'>=t} g^(t'-t)``
- influence-aware: ``(V[t, a] + sum_{t'>t} g^(t'-t) mean_j V[t', j]) / sum_{t'>=t} g^(t'-t)``

(``g`` = gamma, 1 in the paper's runs.) Each function takes the whole ``[T, A]`` score matrix and
returns the ``[T, A]`` reward matrix; :func:`verifier_rewards` applies the guards to every answer
first and then the shape named in a run's params (:data:`SHAPES`), for any multi-turn run:
the SC-MAKS debate (``debate.verifier_reward``: turns = the generation phase and the debate rounds,
agents = the pool) and HARIS's reasoning agent (``train.reasoning.reward: maporl_reasoning``: one
agent, one final answer, so ``T = A = 1`` and the three shapes coincide; the guards are what
changes against ``haris_reasoning``). The verifier on claims is the rule one: 1 for the gold
verdict, 0 otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from factrl.agents.protocol import boxed_spans
from factrl.rewards.haris import QuestionRule, reasoning_reward
from factrl.rewards.registry import RewardFamily, RewardKind, RewardResult, choose_reward

REWARDS = RewardFamily("maporl")  # the three shapes (verifier_shape), maporl_reasoning (claim_verdict)
PENALTY = -10.0
MIN_TOKENS = 50
_TRAILING_CLOSE = re.compile(r"(?:\s*</[A-Za-z_]+\s*>)+\s*$")  # the protocol's closing tags end an answer
_INJECTED = re.compile(r"<result>.*?</result>", re.DOTALL)
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


@REWARDS.register("maporl_immediate", RewardKind.VERIFIER_SHAPE)
def immediate_reward(verifier, gamma: float = 1.0) -> np.ndarray:
    """``[T, A] -> [T, A]``: the verifier's score of the answer itself (``gamma`` unused: no later turn
    counts; taken so that every shape is called alike)."""
    return _scores(verifier).copy()


@REWARDS.register("maporl_cumulative", RewardKind.VERIFIER_SHAPE)
def cumulative_reward(verifier, gamma: float = 1.0) -> np.ndarray:
    """``[T, A] -> [T, A]``: discounted mean of the agent's own scores from turn t to the last turn."""
    v = _scores(verifier)
    d = _discounts(v.shape[0], gamma)
    return (d @ v) / d.sum(axis=1, keepdims=True)


@REWARDS.register("maporl_influence", RewardKind.VERIFIER_SHAPE)
def influence_aware_reward(verifier, gamma: float = 1.0) -> np.ndarray:
    """``[T, A] -> [T, A]``: own score now plus the discounted mean score of all agents later on."""
    v = _scores(verifier)
    d = _discounts(v.shape[0], gamma)
    future = d - np.eye(v.shape[0])  # t' > t only
    team = v.mean(axis=1, keepdims=True)  # [T, 1]
    return (v + future @ team) / d.sum(axis=1, keepdims=True)


SHAPES = tuple(REWARDS.names(RewardKind.VERIFIER_SHAPE))  # the names ``debate.verifier_reward`` may take


def penalized_score(verifier_score: float, answer: str, *, min_tokens: int = MIN_TOKENS) -> float:
    """The appendix's reward-hacking guards applied to one verifier score (-10 when any fires)."""
    answer = _TRAILING_CLOSE.sub("", answer)
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


def verifier_rewards(shape: str, verifier, answers: Sequence[Sequence[str]] | None = None, *, gamma: float = 1.0,
                     min_tokens: int = MIN_TOKENS) -> np.ndarray:
    """``[T, A]`` rewards of a multi-turn run: each verifier score ``V[t, a]`` guarded against reward
    hacking with its answer ``answers[t][a]`` (:func:`penalized_score`; no guard when ``answers`` is
    None), then shaped by ``shape`` (one of :data:`SHAPES`; another name is an
    :class:`~factrl.registry.UnknownName`, a ValueError, naming them)."""
    shaped = choose_reward(shape, RewardKind.VERIFIER_SHAPE, REWARDS)
    v = _scores(verifier)
    if answers is not None:
        if len(answers) != v.shape[0] or any(len(row) != v.shape[1] for row in answers):
            raise ValueError(f"answers must be {v.shape[0]} turns x {v.shape[1]} agents like the verifier scores")
        v = np.array([[penalized_score(v[t, a], answers[t][a], min_tokens=min_tokens) for a in range(v.shape[1])]
                      for t in range(v.shape[0])])
    return shaped(v, gamma=gamma)


@REWARDS.register("maporl_reasoning", RewardKind.CLAIM_VERDICT)
def reasoning_verifier_reward(response: str, label: str, *, num_hops: int | None = None,
                              require_question: QuestionRule = False,
                              min_tokens: int = MIN_TOKENS) -> RewardResult:
    """HARIS's reasoning agent scored the MAPoRL way (a ``claim_verdict`` reward, like ``haris_reasoning``):
    the rule verifier (1 for the gold verdict in a valid format, else 0) behind the hacking guards, applied to
    the agent's own text (injected ``<result>`` spans left out)."""
    base = reasoning_reward(response, label, num_hops=num_hops, require_question=require_question)
    own = _INJECTED.sub(" ", response)  # the guards judge what the agent wrote, not the reports it read
    score = penalized_score(base.parts.get("correct", 0.0), own, min_tokens=min_tokens)
    return RewardResult(score=score, parts={**base.parts, "guarded": float(score == PENALTY)},
                        format_valid=base.format_valid)
