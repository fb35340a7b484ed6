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

The estimators are registered by name in :data:`KL_ESTIMATORS` (params ``kl_type``).
"""

from __future__ import annotations

import torch

from factrl.registry import Registry

# estimators by name: (logp [B, T], ref_logp [B, T]) -> [B, T] per-token KL estimate
KL_ESTIMATORS: Registry = Registry("KL estimator", hint=" (optionally with '+': straight-through k2 gradient)")


@KL_ESTIMATORS.register("k1", "kl")
def k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``x``: unbiased, high variance, can be negative."""
    return logp - ref_logp


@KL_ESTIMATORS.register("abs")
def absolute(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``|x|``."""
    return (logp - ref_logp).abs()


@KL_ESTIMATORS.register("k2", "mse")
def k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``x^2 / 2``; its gradient is the unbiased one (used by the ``+`` variants)."""
    return 0.5 * (logp - ref_logp).square()


@KL_ESTIMATORS.register("k3", "low_var_kl")
def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``exp(-x) + x - 1``, with verl's clamps of ``-x`` to [-20, 20] and of the result to [-10, 10]."""
    log_ratio = torch.clamp(ref_logp - logp, min=-20, max=20)
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference with the estimator registered as
    ``kind`` in :data:`KL_ESTIMATORS`, or ``kind`` + ``"+"`` for its straight-through variant.

    logp, ref_logp: ``[B, T]`` log-probabilities of the sampled tokens under policy / reference.
    Returns ``[B, T]`` (unmasked; aggregate with ``losses.agg_loss``).
    """
    straight_through = kind.endswith("+")
    estimator = KL_ESTIMATORS.lookup(kind[:-1] if straight_through else kind)
    value = estimator(logp, ref_logp)
    if not straight_through or estimator is k2:
        return value
    grad = k2(logp, ref_logp)
    return grad - grad.detach() + value.detach()
