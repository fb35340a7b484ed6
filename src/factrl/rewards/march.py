"""MARCH's claim-consistency rewards: zero-tolerance (ZTR) and error rate (ERR).

The Solver's response is reduced to atomic claims with answers ``a_i``; the Checker answers the same
questions from the documents alone, several samples per question, and the majority answer is the
consensus ``a_hat_i``. ZTR succeeds only if every ``a_i`` matches its ``a_hat_i`` (eq. 7): one
mismatch fails the whole trajectory. The paper's main scalar is penalty-based (0 / -1); its ablation
also reports the incentive-based 0 / 1 form, which is the default here so rewards stay in [0, 1] like
the other registered rewards (``penalty=True`` gives 0 / -1). ERR is the proportional variant.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from factrl.rewards.registry import RewardResult, register
from factrl.text import normalize_answer


def majority_answer(samples: Sequence[str]) -> str | None:
    """Most frequent normalised answer among the Checker's samples (ties: first seen); None if empty."""
    normed = [normalize_answer(s) for s in samples if s is not None]
    if not normed:
        return None
    counts = Counter(normed)
    best = max(counts.values())
    return next(a for a in normed if counts[a] == best)


def claim_agreements(solver: Sequence[str], checker: Sequence[str | Sequence[str]]) -> list[bool]:
    """Per claim: does the Solver's answer equal the Checker's (majority) answer after normalisation?"""
    if len(solver) != len(checker):
        raise ValueError(f"{len(solver)} solver answers but {len(checker)} checker answers")
    out = []
    for a, checks in zip(solver, checker):
        consensus = majority_answer([checks] if isinstance(checks, str) else list(checks))
        # an answer that normalises to nothing ("the", "") cannot match anything
        out.append(bool(consensus) and normalize_answer(a or "") == consensus)
    return out


@register("march_ztr")
def zero_tolerance_reward(
    solver: Sequence[str], checker: Sequence[str | Sequence[str]], *, penalty: bool = False
) -> RewardResult:
    """1 (or 0 with ``penalty``) if every claim agrees with the Checker, else 0 (or -1)."""
    agree = claim_agreements(solver, checker)
    n_err = sum(not x for x in agree)
    ok = n_err == 0
    score = (0.0 if ok else -1.0) if penalty else (1.0 if ok else 0.0)
    return RewardResult(score=score, parts={"n_claims": float(len(agree)), "n_err": float(n_err)})


@register("march_err")
def error_rate_reward(solver: Sequence[str], checker: Sequence[str | Sequence[str]]) -> RewardResult:
    """``-N_err / N_total`` (0 when there are no claims)."""
    agree = claim_agreements(solver, checker)
    n_err = sum(not x for x in agree)
    score = -n_err / len(agree) if n_err else 0.0
    return RewardResult(score=score, parts={"n_claims": float(len(agree)), "n_err": float(n_err)})
