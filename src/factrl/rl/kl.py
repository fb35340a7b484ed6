"""KL penalty estimators between the policy and a frozen reference, per token.

Same estimators and clamps as verl's ``kl_penalty`` (after Schulman, "Approximating KL
divergence", 2020), with ``x = logp - ref_logp``:

- ``k1`` / ``kl``: ``x`` (unbiased, high variance, can be negative);
- ``abs``: ``|x|``;
- ``k2`` / ``mse``: ``x^2 / 2``;
- ``k3`` / ``low_var_kl``: ``exp(-x) + x - 1`` with ``-x`` clamped to [-20, 20] and the result to
  [-10, 10] (verl's clamps, which keep one wild token from dominating the loss).

A trailing ``+`` (``k3+``) keeps the forward value of the estimator but takes the gradient of k2,
whose gradient is the unbiased one (verl's straight-through trick).
"""

from __future__ import annotations

import torch

KL_KINDS = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")


def _forward(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    if kind in ("k1", "kl"):
        return logp - ref_logp
    if kind == "abs":
        return (logp - ref_logp).abs()
    if kind in ("k2", "mse"):
        return 0.5 * (logp - ref_logp).square()
    if kind in ("k3", "low_var_kl"):
        log_ratio = torch.clamp(ref_logp - logp, min=-20, max=20)
        return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)
    raise ValueError(f"unknown KL estimator {kind!r}; known: {list(KL_KINDS)} (optionally with '+')")


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference.

    logp, ref_logp: ``[B, T]`` log-probabilities of the sampled tokens under policy / reference.
    Returns ``[B, T]`` (unmasked; aggregate with ``losses.agg_loss``).
    """
    straight_through = kind.endswith("+")
    base = kind[:-1] if straight_through else kind
    value = _forward(logp, ref_logp, base)
    if not straight_through or base in ("k2", "mse"):
        return value
    k2 = 0.5 * (logp - ref_logp).square()
    return k2 - k2.detach() + value.detach()
