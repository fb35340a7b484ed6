"""The gate before RL time: is there anything for GRPO to learn from on these prompts?

GRPO's advantage is a rollout's reward minus its group's mean, so a group whose rollouts all
score the same contributes nothing but KL. Before hours of training, sample a few groups from the
policy as it is and look at two figures (the issue's gate; Yue et al., "limit of RLVR": RL selects
what some samples already do):

* ``pass_at_k``: the share of prompts some of whose k samples are right (the unbiased estimator of
  Chen et al. 2021 from n >= k samples). pass@k well above mean accuracy means the skill is there to
  be selected; pass@k near mean accuracy means the samples agree with each other.
* ``uniform_group_rate``: the share of groups whose rewards are all equal (all right or all wrong).
  Near 1, GRPO steps are empty; the learning runs of 2026-11-26 had 0.95-0.99.

:func:`group_figures` computes them from per-rollout rewards and correctness grouped by prompt;
the HARIS round measures them for its starting pair before it trains (``train.reasoning.gate_claims``,
``factrl.recipes.haris.train.measure_gate``), and ``factrl train-summary`` prints them (:func:`gate_sentence`).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` samples drawn without replacement from ``n`` samples,
    ``c`` of them right, is right: ``1 - C(n - c, k) / C(n, k)``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    return 1.0 - comb(n - c, k) / comb(n, k)


def subset_rate(counts: Sequence[int], n: int, g: int) -> float:
    """Probability that ``g`` samples drawn without replacement from ``n`` fall in one class, when the
    classes hold ``counts`` samples: ``sum_j C(m_j, g) / C(n, g)`` (a group of ``g`` all-equal)."""
    return sum(comb(m, g) for m in counts) / comb(n, g)


def _reward_classes(rewards: Sequence[float], tol: float) -> list[int]:
    """Sizes of the classes of equal rewards (within ``tol`` of the class's first member)."""
    firsts: list[float] = []
    sizes: list[int] = []
    for r in sorted(rewards):
        if firsts and r - firsts[-1] <= tol:
            sizes[-1] += 1
        else:
            firsts.append(r)
            sizes.append(1)
    return sizes


def group_figures(rewards: Sequence[Sequence[float]], correct: Sequence[Sequence[bool]], k: int | None = None,
                  tol: float = 1e-6, group_size: int | None = None) -> dict:
    """Gate figures of samples of rollouts, one sample set per prompt.

    rewards: ``[P][n]`` each rollout's scalar reward; correct: ``[P][n]`` whether its answer is right.
    k: pass@k's k (default: the smallest sample count). group_size: the GRPO group the figures are
    for (default: all of a prompt's samples); with ``n`` samples above it, the all-equal and
    all-right/-wrong rates are those of a random group of ``group_size`` of them (unbiased, as pass@k
    is), so 8 samples measure pass@8 and a round of groups of 4 at once. Returns ``groups``,
    ``rollouts``, ``accuracy`` (mean correctness), ``pass_at_k`` (mean over prompts), ``k``,
    ``group_size``, ``uniform_group_rate`` (rewards equal within ``tol``), ``all_right_rate``,
    ``all_wrong_rate`` and ``mixed_group_rate`` (correctness).
    """
    if len(rewards) != len(correct) or not rewards:
        raise ValueError(f"need the same, non-zero number of reward and correctness groups "
                         f"({len(rewards)} and {len(correct)})")
    sizes = [len(g) for g in rewards]
    if any(len(r) != len(c) or len(r) == 0 for r, c in zip(rewards, correct)):
        raise ValueError("every group needs as many rewards as correctness flags, and at least one")
    k = min(sizes) if k is None else k
    size = min(sizes) if group_size is None else group_size
    if not 1 <= size <= min(sizes):
        raise ValueError(f"group_size {size} needs 1 <= group_size <= the fewest samples of a prompt ({min(sizes)})")
    passes = [pass_at_k(len(c), sum(map(bool, c)), k) for c in correct]
    uniform = [subset_rate(_reward_classes(r, tol), len(r), size) for r in rewards]
    right = [subset_rate([sum(map(bool, c))], len(c), size) for c in correct]
    wrong = [subset_rate([len(c) - sum(map(bool, c))], len(c), size) for c in correct]
    g = len(rewards)
    return {
        "groups": g,
        "rollouts": sum(sizes),
        "accuracy": sum(sum(map(bool, c)) for c in correct) / sum(sizes),
        "k": k,
        "group_size": size,
        "pass_at_k": sum(passes) / g,
        "uniform_group_rate": sum(uniform) / g,
        "all_right_rate": sum(right) / g,
        "all_wrong_rate": sum(wrong) / g,
        "mixed_group_rate": 1.0 - (sum(right) + sum(wrong)) / g,
    }


def figures_by_stratum(results: Sequence, samples: int, strata: Sequence[str], group_size: int | None = None
                       ) -> tuple[dict, dict[str, dict]]:
    """Gate figures of scored rollouts, overall and per stratum.

    results: ``[P * samples]`` rollout results in prompt order, each with a ``score`` and a ``correct``
    part (``factrl.rewards.registry.RewardResult``); strata: ``[P]`` a label per prompt (e.g.
    ``"2hop"``). Returns :func:`group_figures` (``k = samples``, the round's ``group_size``) of every
    prompt's samples, and of each stratum's keyed by label in sorted order."""
    n = samples
    rewards = [[r.score for r in results[i * n:(i + 1) * n]] for i in range(len(strata))]
    correct = [[bool(r.parts.get("correct")) for r in results[i * n:(i + 1) * n]] for i in range(len(strata))]
    rows: dict[str, list[int]] = {}
    for i, label in enumerate(strata):
        rows.setdefault(label, []).append(i)
    per = {label: group_figures([rewards[i] for i in ix], [correct[i] for i in ix], k=n, group_size=group_size)
           for label, ix in sorted(rows.items())}
    return group_figures(rewards, correct, k=n, group_size=group_size), per


def gate_passes(figures: dict, max_uniform: float = 0.5, min_headroom: float = 0.05) -> tuple[bool, str]:
    """Whether RL time is worth spending: at most ``max_uniform`` of the groups all-equal, and pass@k
    at least ``min_headroom`` above mean accuracy (some samples do what others do not). Returns the
    decision and a sentence with the figures behind it."""
    headroom = figures["pass_at_k"] - figures["accuracy"]
    ok = figures["uniform_group_rate"] <= max_uniform and headroom >= min_headroom
    return ok, (f"{'open' if ok else 'closed'}: {figures['uniform_group_rate']:.2f} of {figures['groups']} groups "
                f"all-equal (at most {max_uniform}), pass@{figures['k']} {figures['pass_at_k']:.2f} against "
                f"accuracy {figures['accuracy']:.2f} (headroom {headroom:+.2f}, at least {min_headroom})")


# what a stage with ``gate_claims: 0`` writes (DVC declares the file)
NO_GATE = {"claims": 0, "open": None, "decision": "not measured (gate_claims: 0)"}


def gate_sentence(gate: dict) -> str:
    """One line of a gate file for a log: pass@1, pass@G and the all-equal share on how many claims."""
    if not gate.get("claims"):
        return gate["decision"]
    g, n = gate["group_size"], gate.get("samples", gate["group_size"])
    return (f"the starting policy on {gate['claims']} training prompts x {n} rollouts: "
            f"pass@1 {gate['pass_at_1']:.2f}, pass@{n} {gate[f'pass_at_{n}']:.2f}, "
            f"all-equal groups of {g} {gate['uniform_group_rate']:.2f} ({gate['decision'].split(':')[0]})")
