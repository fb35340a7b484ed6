"""Clipped policy loss and aggregation: parity with verl 0.9, dual-clip, micro-batch invariance."""

from __future__ import annotations

import pytest
import torch

from factrl.rl.losses import agg_loss, entropy_from_logits, logprobs_from_logits, masked_mean, policy_loss


def _inputs(seed=0, b=10, t=13):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 4
    new = old + torch.randn(b, t, generator=g) * 0.6  # many ratios outside [0.8, 1.28], some > 3
    adv = torch.randn(b, 1, generator=g).expand(b, t).clone()
    mask = (torch.rand(b, t, generator=g) > 0.3).float()
    mask[3] = 0  # a fully masked response (e.g. all injected): excluded from seq-mean
    return new, old, adv * mask, mask


def _verl_config(**kw):
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=5, ppo_micro_batch_size_per_gpu=1, **kw)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("clip", [(0.2, 0.2), (0.2, 0.28)])
def test_policy_loss_and_grad_parity_with_verl(verl_algos, agg, clip):
    new, old, adv, mask = _inputs()
    cfg = _verl_config(clip_ratio=clip[0], clip_ratio_low=clip[0], clip_ratio_high=clip[1],
                       clip_ratio_c=3.0, loss_agg_mode=agg)
    a = new.clone().requires_grad_(True)
    b = new.clone().requires_grad_(True)
    expected, vm = verl_algos.compute_policy_loss_vanilla(old, a, adv, mask.bool(), loss_agg_mode=agg, config=cfg)
    ours, stats = policy_loss(b, old, adv, mask, clip[0], clip[1], agg, clip_ratio_c=3.0)
    assert abs(ours.item() - expected.item()) < 1e-6
    expected.backward()
    ours.backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-7, rtol=0)
    assert stats["clipfrac"] == pytest.approx(vm["actor/pg_clipfrac"], abs=1e-6)
    assert stats["clipfrac_lower"] == pytest.approx(vm["actor/pg_clipfrac_lower"], abs=1e-6)
    assert stats["ppo_kl"] == pytest.approx(vm["actor/ppo_kl"], abs=1e-6)
    assert stats["clipfrac"] > 0  # the inputs do exercise the clip


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "token-sum", "seq-mean-token-sum"])
def test_agg_loss_parity_with_verl(verl_algos, agg):
    new, _, _, mask = _inputs(seed=2)
    assert abs(agg_loss(new, mask, agg).item() - verl_algos.agg_loss(new, mask, agg).item()) < 1e-6


def test_dual_clip_caps_negative_advantage_loss():
    logp = torch.tensor([[2.0]])  # ratio e^2 ~ 7.4 on a negative advantage
    old, adv, mask = torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1)
    capped, stats = policy_loss(logp, old, adv, mask, clip_ratio_c=3.0)
    plain, _ = policy_loss(logp, old, adv, mask, clip_ratio_c=None)
    assert capped.item() == pytest.approx(3.0) and stats["clipfrac_lower"] == 1.0
    assert plain.item() == pytest.approx(torch.e**2, rel=1e-5)


def test_micro_batches_sum_to_the_mini_batch_loss():
    new, old, adv, mask = _inputs(seed=3)
    for agg in ("token-mean", "seq-mean-token-mean"):
        whole, _ = policy_loss(new, old, adv, mask, agg=agg)
        kw = dict(num_tokens=mask.sum(), num_seqs=(mask.sum(-1) > 0).sum())
        parts = sum(policy_loss(new[s : s + 3], old[s : s + 3], adv[s : s + 3], mask[s : s + 3], agg=agg, **kw)[0]
                    for s in range(0, len(new), 3))
        assert parts.item() == pytest.approx(whole.item(), abs=1e-6)


def test_masked_positions_do_not_matter():
    new, old, adv, mask = _inputs(seed=4)
    junk = torch.where(mask.bool(), new, torch.full_like(new, float("nan")))  # NaNs where masked
    a, _ = policy_loss(junk, old, adv, mask)
    b, _ = policy_loss(new, old, adv, mask)
    assert a.item() == pytest.approx(b.item(), abs=1e-7)
    assert masked_mean(junk, mask).item() == pytest.approx(masked_mean(new, mask).item())


def test_logprobs_and_entropy_from_logits():
    logits = torch.randn(2, 3, 7)
    labels = torch.randint(0, 7, (2, 3))
    expected = torch.log_softmax(logits, -1).gather(-1, labels[..., None])[..., 0]
    assert torch.allclose(logprobs_from_logits(logits, labels), expected, atol=1e-6)
    p = torch.softmax(logits, -1)
    assert torch.allclose(entropy_from_logits(logits), -(p * p.log()).sum(-1), atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_token_logprobs_equal_full_logits_with_gradients(temperature):
    """Log-probs and entropies at chosen rows, chunked (no logits kept), equal the full-logits path's,
    and so do their gradients to the hidden states and the head's weight (fp32 rounding)."""
    from factrl.rl.losses import token_logprobs_chunked

    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(11, 8, generator=g, requires_grad=True)
    weight = torch.randn(50, 8, generator=g, requires_grad=True)
    labels = torch.randint(0, 50, (11,), generator=g)
    upstream = torch.randn(11, generator=g)  # an arbitrary loss on top: sum(upstream * logp)

    logits = hidden @ weight.T / temperature
    ref_logp = logprobs_from_logits(logits[None], labels[None])[0]
    ref_entropy = entropy_from_logits(logits[None])[0]
    ref_gh, ref_gw = torch.autograd.grad((upstream * ref_logp).sum(), (hidden, weight))

    logp, entropy = token_logprobs_chunked(hidden, weight, labels, temperature=temperature, chunk=4)
    gh, gw = torch.autograd.grad((upstream * logp).sum(), (hidden, weight))
    assert not entropy.requires_grad  # logged only
    torch.testing.assert_close(logp, ref_logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, ref_entropy, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gh, ref_gh, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, ref_gw, rtol=1e-5, atol=1e-5)


def test_chunked_token_logprobs_in_bf16_round_like_the_models_own_head():
    """With a bf16 projection (autocast), the chunked log-probs are those of bf16 logits upcast to
    fp32, as the model's own head gives under autocast."""
    from factrl.rl.losses import token_logprobs_chunked

    g = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(7, 16, generator=g), torch.randn(40, 16, generator=g)
    labels = torch.randint(0, 40, (7,), generator=g)
    ref = logprobs_from_logits((hidden.bfloat16() @ weight.bfloat16().T)[None], labels[None])[0]
    logp, _ = token_logprobs_chunked(hidden, weight, labels, chunk=3, compute_dtype=torch.bfloat16)
    torch.testing.assert_close(logp, ref, rtol=1e-5, atol=1e-5)
