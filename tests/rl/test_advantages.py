"""Group-normalised advantages: hand-computed values and parity with verl 0.9."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from factrl.rl.advantages import grpo_advantages, token_advantages, uniform_group_rate


def test_one_correct_in_a_group_of_five():
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0]), ["a"] * 5)
    std = float(np.std([1, 0, 0, 0, 0], ddof=1))  # unbiased, as verl's torch.std
    assert adv[0].item() == pytest.approx(0.8 / (std + 1e-6), rel=1e-6)
    assert adv[1:].tolist() == pytest.approx([-0.2 / (std + 1e-6)] * 4, rel=1e-6)


def test_equal_rewards_give_zero_advantage_and_groups_are_independent():
    adv = grpo_advantages(torch.tensor([0.1, 0.1, 1.0, 0.0]), [7, 7, "x", "x"])
    assert adv[:2].tolist() == [0.0, 0.0]
    assert adv[2].item() > 0 > adv[3].item()


def test_uniform_group_rate_counts_groups_without_signal():
    # group 7 all equal (zero advantages), group "x" mixed, group 2 all equal
    rewards, groups = [0.1, 0.1, 1.0, 0.1, 0.55, 0.55], [7, 7, "x", "x", 2, 2]
    assert uniform_group_rate(rewards, groups) == pytest.approx(2 / 3)
    adv = grpo_advantages(torch.tensor(rewards), groups)
    assert adv[[0, 1, 4, 5]].tolist() == [0.0] * 4 and adv[2] != 0  # what the rate counts
    assert uniform_group_rate([1.0, 0.0], [0, 0]) == 0.0
    with pytest.raises(ValueError, match="3 rewards but 2 group ids"):
        uniform_group_rate([1.0, 0.0, 1.0], [0, 0])


def test_dr_grpo_only_centres():
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), [0, 0, 1, 1], norm_by_std=False)
    assert adv.tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="3 rewards but 2 group ids"):
        grpo_advantages(torch.tensor([1.0, 0.0, 1.0]), [0, 0])


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_parity_with_verl(verl_algos, norm_by_std):
    g = torch.Generator().manual_seed(1)
    sizes = [5, 5, 1, 3, 5, 2]  # includes a singleton group (verl: mean 0, std 1)
    index = np.array([i for i, s in enumerate(sizes) for _ in range(s)])
    b, t = len(index), 9
    rewards = torch.rand(b, generator=g).round(decimals=1)  # ties, like 1 / 0.1 / 0 rewards
    mask = (torch.rand(b, t, generator=g) > 0.25).float()
    token_rewards = torch.zeros(b, t)
    token_rewards[:, -1] = rewards
    expected, _ = verl_algos.compute_grpo_outcome_advantage(
        token_rewards, mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=norm_by_std
    )
    ours = token_advantages(grpo_advantages(rewards, index, eps=1e-6, norm_by_std=norm_by_std), mask)
    assert torch.allclose(ours, expected, atol=1e-6, rtol=0)
