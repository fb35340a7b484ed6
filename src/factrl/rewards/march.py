"""MARCH's claim-consistency rewards: zero-tolerance (ZTR) and error rate (ERR).

The Solver's response is reduced to atomic claims with answers ``a_i``; the Checker answers the same
questions from the documents alone, several samples per question, and the majority answer is the
consensus ``a_hat_i``. ZTR succeeds only if every ``a_i`` matches its ``a_hat_i`` (eq. 7): one
mismatch fails the whole trajectory. The paper's main scalar is penalty-based (0 / -1); its ablation
also reports the incentive-based 0 / 1 form, which is the default here so rewards stay in [0, 1] like
the other registered rewards (``penalty=True`` gives 0 / -1). ERR is the proportional variant.

The Checker's k samples vote on each claim (MARCH's rule): +1 for a sample whose answer equals
``a_i``, -1 for any other answer (a different number, "cannot answer", nothing parsable); the claim
fails when the votes sum below 0 (ties pass). Answers that state a number are compared as numbers
(``factrl.text.normalize_number``: ``1,200`` = ``1200`` = ``1.2 thousand``), anything else
after text normalisation. Every reward here is of kind ``episode`` (``(solver, checker)``), so
training code picks one by name without knowing which.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from factrl.rewards.registry import RewardFamily, RewardKind, RewardResult
from factrl.text import normalize_answer, normalize_number

REWARDS = RewardFamily("march")  # march_ztr, march_err (episode)


def majority_answer(samples: Sequence[str]) -> str | None:
    """Most frequent normalised answer among the Checker's samples (ties: first seen); None if empty."""
    normed = [normalize_answer(s) for s in samples if s is not None]
    if not normed:
        return None
    counts = Counter(normed)
    best = max(counts.values())
    return next(a for a in normed if counts[a] == best)


def same_answer(a: str | None, b: str | None) -> bool:
    """Do two answers agree? As numbers when both state exactly one, else as normalised text; an
    answer that normalises to nothing (``""``, ``"the"``) agrees with nothing."""
    if a is None or b is None:
        return False
    x, y = normalize_number(a), normalize_number(b)
    if x is not None and y is not None:
        return x == y
    x, y = normalize_answer(a), normalize_answer(b)
    return bool(x) and x == y


def vote_sum(answer: str | None, samples: Sequence[str | None]) -> int:
    """MARCH's checker vote on one claim: +1 per sample agreeing with ``answer``, -1 per other sample."""
    return sum(1 if same_answer(answer, s) else -1 for s in samples)


def claim_agreements(solver: Sequence[str], checker: Sequence[str | Sequence[str]]) -> list[bool]:
    """Per claim: do the Checker's samples (one string or a list of k) back the Solver's answer, i.e.
    is their vote sum at least 0? A claim with no sample at all fails (nothing backs it)."""
    if len(solver) != len(checker):
        raise ValueError(f"{len(solver)} solver answers but {len(checker)} checker answers")
    out = []
    for a, checks in zip(solver, checker):
        samples = [checks] if isinstance(checks, str) or checks is None else list(checks)
        out.append(bool(samples) and vote_sum(a, samples) >= 0)
    return out


@REWARDS.register("march_ztr", RewardKind.EPISODE)
def zero_tolerance_reward(
    solver: Sequence[str], checker: Sequence[str | Sequence[str]], *, penalty: bool = False
) -> RewardResult:
    """1 (or 0 with ``penalty``) if every claim agrees with the Checker, else 0 (or -1)."""
    agree = claim_agreements(solver, checker)
    n_err = sum(not x for x in agree)
    ok = n_err == 0
    score = (0.0 if ok else -1.0) if penalty else (1.0 if ok else 0.0)
    return RewardResult(score=score, parts={"n_claims": float(len(agree)), "n_err": float(n_err)})


@REWARDS.register("march_err", RewardKind.EPISODE)
def error_rate_reward(solver: Sequence[str], checker: Sequence[str | Sequence[str]]) -> RewardResult:
    """``-N_err / N_total`` (0 when there are no claims)."""
    agree = claim_agreements(solver, checker)
    n_err = sum(not x for x in agree)
    score = -n_err / len(agree) if n_err else 0.0
    return RewardResult(score=score, parts={"n_claims": float(len(agree)), "n_err": float(n_err)})
