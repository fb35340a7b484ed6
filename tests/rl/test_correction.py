"""Rollout correction: truncated importance weights and gap metrics, parity with verl 0.9's
rollout_corr_helper and its policy loss with ``rollout_is_weights``."""

from __future__ import annotations

import pytest
import torch

from factrl.rl.correction import add_sums, gap_metrics, gap_sums, tis_weights
from factrl.rl.losses import policy_loss
from tests.rl.test_losses import _inputs, _verl_config


def _engine(old, seed=5):
    """Engine log-probs near the trainer's: most ratios within a few percent, some far outside the cap."""
    g = torch.Generator().manual_seed(seed)
    engine = old + torch.randn(old.shape, generator=g) * 0.05
    engine[0, :4] = old[0, :4] - 2.0  # the trainer finds these far likelier: ratio e^2 > cap 2
    return engine


@pytest.fixture(scope="module")
def rollout_corr():
    return pytest.importorskip("verl.trainer.ppo.rollout_corr_helper", reason="verl 0.9 not installed (make setup)")


def test_tis_weights_and_metrics_match_verl(rollout_corr):
    _, old, _, mask = _inputs()
    engine = _engine(old)
    ours = tis_weights(old, engine, mask, cap=2.0)
    expected, vm = rollout_corr.compute_rollout_correction_weights(old - engine, mask, "token", 2.0)
    # verl zeroes the weights of masked tokens; ours are 1 there (never used: the loss is masked)
    assert torch.allclose(ours[mask.bool()], expected[mask.bool()], atol=1e-6, rtol=0)
    metrics = gap_metrics(gap_sums(old, engine, mask, cap=2.0))
    assert metrics["tis_weight_mean"] == pytest.approx(vm["rollout_is_mean"], abs=1e-6)
    assert metrics["tis_clipfrac"] == pytest.approx(vm["rollout_is_ratio_fraction_high"], abs=1e-6)
    assert metrics["tis_clipfrac"] > 0  # the inputs do reach the cap
    off = rollout_corr.compute_offpolicy_metrics(old, engine, mask)
    assert metrics["rollout_kl"] == pytest.approx(off["kl"], abs=1e-6)
    assert metrics["rollout_logp_gap"] == pytest.approx(float((old - engine).abs()[mask.bool()].mean()), abs=1e-6)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_policy_loss_with_is_weights_matches_verl(verl_algos, agg):
    new, old, adv, mask = _inputs()
    weights = tis_weights(old, _engine(old), mask, cap=2.0)
    cfg = _verl_config(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0, loss_agg_mode=agg)
    a, b = new.clone().requires_grad_(True), new.clone().requires_grad_(True)
    expected, _ = verl_algos.compute_policy_loss_vanilla(old, a, adv, mask.bool(), loss_agg_mode=agg, config=cfg,
                                                         rollout_is_weights=weights)
    ours, _ = policy_loss(b, old, adv, mask, 0.2, 0.2, agg, clip_ratio_c=3.0, is_weights=weights)
    assert abs(ours.item() - expected.item()) < 1e-6
    expected.backward()
    ours.backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-7, rtol=0)
    plain, _ = policy_loss(new, old, adv, mask, 0.2, 0.2, agg, clip_ratio_c=3.0)
    assert abs(plain.item() - ours.item()) > 1e-4  # the weights do change the loss


def test_step_sums_add_up_and_off_means_no_weights():
    _, old, _, mask = _inputs(seed=1)
    engine = _engine(old)
    total: dict[str, float] = {}
    for s in (slice(0, 4), slice(4, None)):  # two micro-batches give the whole batch's metrics
        add_sums(total, gap_sums(old[s], engine[s], mask[s], cap=2.0))
    whole = gap_metrics(gap_sums(old, engine, mask, cap=2.0))
    assert gap_metrics(total) == pytest.approx(whole)
    off = gap_metrics(gap_sums(old, engine, mask, cap=0.0))
    assert "tis_clipfrac" not in off and off["rollout_logp_gap"] == pytest.approx(whole["rollout_logp_gap"])
    assert gap_metrics({}) == {}
