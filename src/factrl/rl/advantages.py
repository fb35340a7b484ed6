"""GRPO advantages: each response's reward normalised within the group of its prompt.

The same maths as verl's ``compute_grpo_outcome_advantage`` (``trainer/ppo/core_algos.py``), but
vectorised: a group's rewards are centred on the group mean and, in the original GRPO, divided by
the group's unbiased standard deviation plus ``eps``. Dr.GRPO (Liu et al., 2025) drops the division
(``norm_by_std=False``). A group of one response has mean 0 and std 1 there, so its advantage is
its reward over ``1 + eps``; kept as verl does, so both backends train on identical numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def group_index(group_ids: Sequence | np.ndarray | torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary hashable group ids to dense ints.

    Returns ``(index[B] long, num_groups)``; ids are numbered in order of first appearance.
    """
    if isinstance(group_ids, torch.Tensor):
        group_ids = group_ids.tolist()
    numbering: dict = {}
    index = [numbering.setdefault(g, len(numbering)) for g in list(group_ids)]
    return torch.tensor(index, dtype=torch.long), len(numbering)


def grpo_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence | np.ndarray | torch.Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """Group-normalised advantages.

    rewards: ``[B]`` scalar reward of each response.
    group_ids: ``[B]`` id of the prompt each response answers (responses of a prompt share it).
    Returns ``[B]``: ``(r - mean_g) / (std_g + eps)``, or ``r - mean_g`` when ``norm_by_std`` is
    false; ``std_g`` is the unbiased (n - 1) standard deviation of the group.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    index, num_groups = group_index(group_ids)
    if index.numel() != rewards.numel():
        raise ValueError(f"{rewards.numel()} rewards but {index.numel()} group ids")
    with torch.no_grad():
        counts = torch.zeros(num_groups).index_add_(0, index, torch.ones_like(rewards))
        sums = torch.zeros(num_groups).index_add_(0, index, rewards)
        mean = sums / counts
        sq = torch.zeros(num_groups).index_add_(0, index, (rewards - mean[index]) ** 2)
        std = torch.sqrt(sq / (counts - 1).clamp(min=1))
        single = counts == 1
        mean = torch.where(single, torch.zeros_like(mean), mean)
        std = torch.where(single, torch.ones_like(std), std)
        centred = rewards - mean[index]
        return centred / (std[index] + eps) if norm_by_std else centred


def uniform_group_rate(rewards: torch.Tensor, group_ids: Sequence | np.ndarray | torch.Tensor) -> float:
    """Share of groups whose rewards are all equal.

    rewards: ``[B]``; group_ids: ``[B]`` as in :func:`grpo_advantages`. Such a group's advantages
    are 0, so GRPO learns nothing from it but the KL term: a rate near 1 means the policy's
    samples agree on every prompt (collapse), and a step at 1 trains on no reward at all.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    index, num_groups = group_index(group_ids)
    if index.numel() != rewards.numel():
        raise ValueError(f"{rewards.numel()} rewards but {index.numel()} group ids")
    high = torch.full((num_groups,), -torch.inf).scatter_reduce(0, index, rewards, "amax")
    low = torch.full((num_groups,), torch.inf).scatter_reduce(0, index, rewards, "amin")
    return float((high == low).float().mean())


def token_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Broadcast sequence advantages ``[B]`` over response tokens: ``[B, T]``, zero where ``mask`` is 0."""
    return advantages.unsqueeze(-1) * mask.to(advantages.dtype)
