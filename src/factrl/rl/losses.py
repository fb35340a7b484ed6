"""The GRPO/PPO clipped policy loss, loss aggregation and masked reductions.

Follows verl's ``core_algos`` (``compute_policy_loss_vanilla``, ``agg_loss``) so that the local
trainer and a verl run optimise the same objective. ``mask`` marks the tokens that are trained on:
the model's own response tokens (1), not padding or text injected by a tool (0).

Gradient accumulation: pass the whole mini-batch's token count (``num_tokens``) and sequence count
(``num_seqs``) when aggregating a micro-batch, so that the sum of micro-batch losses equals the
loss of the mini-batch in one piece (verl does the same with its ``global_batch_info``).
"""

from __future__ import annotations

import torch

from factrl.registry import Registry

# loss_agg modes: (loss_mat [B, T], mask [B, T] float, num_tokens, num_seqs) -> scalar; see agg_loss
LOSS_AGGREGATIONS: Registry = Registry("loss aggregation")


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is non-zero (NaNs outside the mask are ignored). Shapes match."""
    kept = torch.where(mask.bool(), values, torch.zeros_like(values))
    return (kept * mask).sum() if dim is None else (kept * mask).sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is non-zero; ``1e-8`` in the denominator as verl."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / (count + 1e-8)


@LOSS_AGGREGATIONS.register("token-mean")
def token_mean(loss_mat: torch.Tensor, mask: torch.Tensor, num_tokens=None, num_seqs=None) -> torch.Tensor:
    """Sum over all valid tokens / ``num_tokens`` (default: valid tokens here): long responses weigh more."""
    return masked_sum(loss_mat, mask) / (mask.sum() if num_tokens is None else num_tokens)


@LOSS_AGGREGATIONS.register("token-sum")
def token_sum(loss_mat: torch.Tensor, mask: torch.Tensor, num_tokens=None, num_seqs=None) -> torch.Tensor:
    """Sum over all valid tokens."""
    return masked_sum(loss_mat, mask)


def _seq_mean(seq_loss: torch.Tensor, tokens_per_seq: torch.Tensor, num_seqs) -> torch.Tensor:
    """``[B]`` per-sequence losses averaged over the ``num_seqs`` sequences with any valid token
    (default: those here)."""
    seq_mask = (tokens_per_seq > 0).to(seq_loss.dtype)
    return masked_sum(seq_loss, seq_mask) / (seq_mask.sum() if num_seqs is None else num_seqs)


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(loss_mat: torch.Tensor, mask: torch.Tensor, num_tokens=None, num_seqs=None) -> torch.Tensor:
    """Each sequence's token mean, averaged over sequences: every response weighs the same."""
    tokens_per_seq = mask.sum(dim=-1)
    return _seq_mean(masked_sum(loss_mat, mask, dim=-1) / (tokens_per_seq + 1e-8), tokens_per_seq, num_seqs)


@LOSS_AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_token_sum(loss_mat: torch.Tensor, mask: torch.Tensor, num_tokens=None, num_seqs=None) -> torch.Tensor:
    """Each sequence's token sum, averaged over sequences."""
    return _seq_mean(masked_sum(loss_mat, mask, dim=-1), mask.sum(dim=-1), num_seqs)


def agg_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    agg: str = "token-mean",
    *,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss ``[B, T]`` into a scalar with the mode registered as ``agg`` in
    :data:`LOSS_AGGREGATIONS` (``token-mean``, ``token-sum``, ``seq-mean-token-mean``,
    ``seq-mean-token-sum``); ``mask`` ``[B, T]`` marks the valid tokens."""
    return LOSS_AGGREGATIONS.lookup(agg)(loss_mat, mask.to(loss_mat.dtype), num_tokens, num_seqs)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg: str = "token-mean",
    *,
    clip_ratio_c: float | None = 3.0,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate loss (GRPO's policy term).

    logp: ``[B, T]`` log-probs of the sampled tokens under the policy being trained (with grad).
    old_logp: ``[B, T]`` log-probs under the policy that sampled them (no grad).
    adv: ``[B, T]`` advantages. mask: ``[B, T]`` 1 for trained tokens.
    clip_low / clip_high: the ratio is clipped to ``[1 - clip_low, 1 + clip_high]``.
    clip_ratio_c: dual-clip bound (Ye et al., 2020): for negative advantages the loss is capped at
        ``-adv * clip_ratio_c``; ``None`` turns dual-clip off. verl always applies it (default 3.0).
    is_weights: ``[B, T]`` rollout-correction weights (no grad; ``factrl.rl.correction``) that
        multiply each token's clipped loss, as verl's ``rollout_is_weights``; None = all 1.
    Returns ``(loss scalar, stats)`` with stats ``clipfrac``, ``clipfrac_lower``, ``ppo_kl``.
    """
    log_ratio = torch.clamp(logp - old_logp, min=-20.0, max=20.0)  # verl's clamp, avoids exp overflow
    ratio = torch.exp(log_ratio)
    loss1 = -adv * ratio
    loss2 = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    clipped = torch.maximum(loss1, loss2)
    stats = {
        "clipfrac": masked_mean((loss2 > loss1).float(), mask).item(),
        "ppo_kl": masked_mean(-log_ratio, mask).detach().item(),
    }
    if clip_ratio_c is not None:
        if clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1.0, got {clip_ratio_c}")
        loss3 = -adv * clip_ratio_c
        dual = torch.minimum(loss3, clipped)
        stats["clipfrac_lower"] = masked_mean(((clipped > loss3) & (adv < 0)).float(), mask).item()
        clipped = torch.where(adv < 0, dual, clipped)
    else:
        stats["clipfrac_lower"] = 0.0
    if is_weights is not None:
        clipped = clipped * is_weights
    loss = agg_loss(clipped, mask, agg, num_tokens=num_tokens, num_seqs=num_seqs)
    return loss, stats


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of each label: logits ``[B, T, V]``, labels ``[B, T]`` -> ``[B, T]`` float32."""
    logits = logits.float()
    picked = torch.gather(logits, -1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each next-token distribution: logits ``[B, T, V]`` -> ``[B, T]`` float32."""
    logits = logits.float()
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


# ---- log-probs at the loss positions only, in chunks --------------------------------------------
# The plain path (``logprobs_from_logits``) takes ``[B, T, V]`` logits of every response position,
# upcasts them to fp32 (49,152 columns for SmolLM2: 0.2 MB per position, and its logit gradient as
# much again), and an entropy that is only logged upcasts them once more. The path below runs the
# output projection itself, only on the positions that carry loss, ``chunk`` rows at a time, and
# keeps none of the logits: the backward pass recomputes each chunk's logits (as TRL's
# ``selective_log_softmax`` and Liger's fused linear cross-entropy avoid full logits; verl's
# ``entropy_from_logits_with_chunking`` chunks the same way). Peak extra memory: one chunk's fp32
# logits and their softmax, ``2 * chunk * V * 4`` bytes, whatever the batch.


def _chunk_stats(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, inv_temp: float,
                 compute_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One chunk's fp32 logits ``[n, V]`` (projected in ``compute_dtype`` and upcast, as the model's
    own head under autocast), their log-sum-exp ``[n]`` and the labels' log-probs ``[n]``."""
    logits = (hidden.to(compute_dtype) @ weight.to(compute_dtype).T).float()
    if inv_temp != 1.0:
        logits = logits * inv_temp
    lse = torch.logsumexp(logits, dim=-1)
    return logits, lse, logits.gather(-1, labels[:, None])[:, 0] - lse


class _TokenLogProbs(torch.autograd.Function):
    """``log softmax(hidden @ weight.T / T)[label]`` per row without keeping any logits; the entropy
    of each row's distribution comes out too, without gradient (it is logged, not trained)."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, inv_temp, chunk, compute_dtype):
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty(n, dtype=torch.float32, device=hidden.device)
        with torch.no_grad():
            for s in range(0, n, chunk):
                logits, lse, picked = _chunk_stats(hidden[s : s + chunk], weight, labels[s : s + chunk], inv_temp,
                                                   compute_dtype)
                logp[s : s + chunk] = picked
                entropy[s : s + chunk] = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
        ctx.save_for_backward(hidden, weight, labels)
        ctx.inv_temp, ctx.chunk, ctx.compute_dtype = inv_temp, chunk, compute_dtype
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, labels = ctx.saved_tensors
        cdt = ctx.compute_dtype
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        w = weight.to(cdt)
        for s in range(0, hidden.shape[0], ctx.chunk):
            h = hidden[s : s + ctx.chunk]
            logits, lse, _ = _chunk_stats(h, weight, labels[s : s + ctx.chunk], ctx.inv_temp, cdt)
            g = grad_logp[s : s + ctx.chunk]
            # d logp / d logits = onehot(label) - softmax; times 1/T for the temperature
            grad_logits = torch.exp(logits - lse[:, None]).mul_(-g[:, None])
            grad_logits.scatter_add_(-1, labels[s : s + ctx.chunk, None], g[:, None])
            if ctx.inv_temp != 1.0:
                grad_logits.mul_(ctx.inv_temp)
            grad_logits = grad_logits.to(cdt)  # the head's backward runs in the dtype its forward ran in
            if grad_hidden is not None:
                grad_hidden[s : s + ctx.chunk] = (grad_logits @ w).to(hidden.dtype)
            if grad_weight is not None:
                grad_weight += (grad_logits.T @ h.to(cdt)).float()
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def token_logprobs_chunked(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *,
                           temperature: float = 1.0, chunk: int = 256,
                           compute_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of ``labels`` and the entropies of their distributions under an output head.

    hidden: ``[N, H]`` the final hidden states of the positions wanted (only those that carry loss).
    weight: ``[V, H]`` the output head's weight (no bias). labels: ``[N]`` token ids.
    temperature: the logits are divided by it (the sampling temperature).
    chunk: positions projected at a time (memory ``~2 * chunk * V * 4`` bytes).
    compute_dtype: the dtype of the projection (bf16 under autocast; default the weight's).
    Returns ``(logp [N] float32, with gradient to hidden and weight; entropy [N] float32, none)``.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    return _TokenLogProbs.apply(hidden, weight, labels, 1.0 / temperature, chunk, compute_dtype or weight.dtype)
