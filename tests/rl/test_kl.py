"""KL estimators: parity with verl 0.9, zero at equality, straight-through gradients."""

from __future__ import annotations

import pytest
import torch

from factrl.rl.kl import kl_penalty

KINDS = ["k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl", "k1+", "k3+", "low_var_kl+"]


def _logps(seed=0, shape=(4, 11)):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(shape, generator=g) * 5
    ref = logp + torch.randn(shape, generator=g) * 2
    ref[0, 0] = logp[0, 0] - 40  # far outside the clamps
    return logp, ref


@pytest.mark.parametrize("kind", KINDS)
def test_parity_with_verl(verl_algos, kind):
    logp, ref = _logps()
    assert torch.allclose(kl_penalty(logp, ref, kind), verl_algos.kl_penalty(logp, ref, kind), atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_when_policy_equals_reference(kind):
    logp, _ = _logps()
    assert torch.count_nonzero(kl_penalty(logp, logp.clone(), kind)) == 0


def test_k3_is_clamped_and_non_negative():
    logp, ref = _logps()
    k3 = kl_penalty(logp, ref, "k3")
    assert k3.min() >= 0 and k3.max() <= 10 and k3[0, 0] == 10


def test_straight_through_keeps_value_takes_k2_gradient():
    logp, ref = _logps()
    a = logp.clone().requires_grad_(True)
    st = kl_penalty(a, ref, "k3+")
    assert torch.equal(st.detach(), kl_penalty(logp, ref, "k3"))
    st.sum().backward()
    assert torch.allclose(a.grad, logp - ref)  # d/dx (x - r)^2 / 2


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown KL estimator 'k9'"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k9")
