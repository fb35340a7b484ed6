"""Rollout correction: the log-prob gap between the rollout engine and the trainer, and truncated
importance sampling (TIS) over it, as verl's ``rollout_corr_helper`` computes them.

The engine that samples the rollouts (the bf16 engine copy of ``LocalLLM``, or vLLM) and the
trainer that scores them compute the same policy with different kernels and precisions, so a
sampled token's log-prob differs between the two: the rollouts come from a slightly different
policy than the one being trained. verl's rollout correction (``algorithm.rollout_correction``:
``rollout_is: token``, ``rollout_is_threshold``; the older ``actor.tis_imp_ratio_cap``) weights
each token's policy loss by the importance ratio ``pi_trainer / pi_engine`` of the old policy,
truncated at a cap so a few tokens with a large mismatch cannot dominate the update. The weight
carries no gradient (it changes the measure, not the objective).

Shapes: ``[B, T]`` per response token, ``mask`` 1 where the token is trained *and* the engine
reported its log-prob.
"""

from __future__ import annotations

import torch

# verl's SAFETY_BOUND: log-ratios are clamped to +-20 before exp (no overflow)
SAFETY_BOUND = 20.0


def tis_weights(old_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor, cap: float) -> torch.Tensor:
    """Token-level truncated importance weights ``min(exp(old_logp - engine_logp), cap)``, ``[B, T]``,
    detached; 1 where ``mask`` is 0 (no correction where the engine's log-prob is unknown).

    old_logp: the trainer's log-probs of the sampled tokens under the policy that sampled them.
    engine_logp: the rollout engine's log-probs of the same tokens.
    """
    log_ratio = (old_logp - engine_logp).detach().clamp(-SAFETY_BOUND, SAFETY_BOUND)
    weights = torch.exp(log_ratio).clamp(max=cap)
    return torch.where(mask.bool(), weights, torch.ones_like(weights))


def gap_sums(old_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor, cap: float) -> dict[str, float]:
    """Sums of one micro-batch's gap statistics over ``mask`` (add them up over a step, then
    :func:`gap_metrics`): tokens, ``|engine - trainer|``, its max, ``engine - trainer`` (the k1
    estimate of KL(engine || trainer), verl's ``rollout_corr/kl``), and for ``cap > 0`` the
    truncated weights and how many of them hit the cap."""
    log_ratio = (old_logp - engine_logp).detach()
    m = mask.bool()
    gap = log_ratio.abs()
    sums = {
        "tokens": float(m.sum()),
        "gap": float(gap[m].sum()),
        "gap_max": float(gap[m].max()) if m.any() else 0.0,
        "kl": float((-log_ratio)[m].sum()),
    }
    if cap > 0:
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
        sums["weight"] = float(raw.clamp(max=cap)[m].sum())
        sums["capped"] = float((raw > cap)[m].sum())
    return sums


def add_sums(total: dict[str, float], part: dict[str, float]) -> None:
    """Accumulate ``part`` into ``total`` (sums add, maxima take the max)."""
    for key, value in part.items():
        total[key] = max(total.get(key, 0.0), value) if key == "gap_max" else total.get(key, 0.0) + value


def gap_metrics(sums: dict[str, float]) -> dict[str, float]:
    """A step's metrics from its accumulated :func:`gap_sums` (empty when no token had an engine
    log-prob): ``rollout_logp_gap`` (mean ``|logp_engine - logp_trainer|``), ``rollout_logp_gap_max``,
    ``rollout_kl``, and with TIS on ``tis_weight_mean`` and ``tis_clipfrac``."""
    n = sums.get("tokens", 0.0)
    if n == 0:
        return {}
    out = {"rollout_logp_gap": sums["gap"] / n, "rollout_logp_gap_max": sums["gap_max"], "rollout_kl": sums["kl"] / n}
    if "weight" in sums:
        out.update(tis_weight_mean=sums["weight"] / n, tis_clipfrac=sums["capped"] / n)
    return out

