"""The PPO aggregator learns to weight the member that is always right; the weighted vote; PPO's loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from factrl.consensus.aggregator import fit_aggregator, ppo_loss, weighted_vote
from factrl.consensus.features import HISTORY
from factrl.consensus.params import AggregatorParams, RewardModelParams
from factrl.consensus.reward_model import fit_reward_model, model_inputs
from tests.consensus.synthetic import pool

# no heuristic pre-training: whatever weight the right member gets, PPO gave it
PPO_ONLY = AggregatorParams(pretrain_steps=0)


def fitted(params: AggregatorParams, ablations=()):
    train, val, test = pool(120, seed=0), pool(40, seed=1, split="dev"), pool(60, seed=2, split="eval")
    rm = fit_reward_model(train, val, RewardModelParams(), seed=0)
    x = {name: model_inputs(fs, rm.scaler) for name, fs in (("train", train), ("val", val), ("test", test))}
    agg = fit_aggregator(x["train"], rm.score(train), x["val"], rm.score(val), train.x[0, :, HISTORY],
                         train.members, params, seed=0, ablations=ablations)
    return agg, agg.weights(x["test"])


def test_ppo_gives_the_always_right_member_most_weight():
    agg, w = fitted(PPO_ONLY)
    assert w.shape == (60, 3) and np.allclose(w.sum(axis=1), 1.0)
    assert w[:, 0].mean() > 0.8
    assert agg.history.val_reward and agg.history.best_iteration >= 0


def test_without_ppo_the_weights_stay_where_they_started():
    agg, w = fitted(PPO_ONLY, ablations=("no_rlhf",))
    assert agg.history.val_reward == [] and agg.history.ppo_loss == []
    assert w[:, 0].mean() < 0.6


def test_uniform_vote_weighs_every_member_alike():
    agg, w = fitted(PPO_ONLY, ablations=("uniform_vote",))
    assert agg.policy is None and np.allclose(w, 1 / 3)
    with pytest.raises(ValueError, match="unknown consensus ablation"):
        fitted(PPO_ONLY, ablations=("no_adversary",))


def test_heuristic_pretraining_follows_historical_accuracy():
    agg, w = fitted(AggregatorParams(pretrain_steps=200), ablations=("no_rlhf",))
    assert w[:, 0].mean() > w[:, 1].mean() and w[:, 0].mean() > w[:, 2].mean()


def test_weighted_vote():
    stances = [["SUPPORTS", "REFUTES", "REFUTES"], ["SUPPORTS", "REFUTES", None], [None, None, None],
               ["SUPPORTS", "REFUTES", "REFUTES"]]
    w = np.array([[0.6, 0.2, 0.2], [0.5, 0.5, 0.0], [1 / 3] * 3, [1 / 3] * 3])
    # heavier side wins; a tie goes to the heaviest member (the first on equal weight); no stance -> None
    assert weighted_vote(stances, w) == ["SUPPORTS", "SUPPORTS", None, "REFUTES"]


def test_ppo_loss_clips_the_ratio_and_adds_entropy():
    logits = torch.tensor([[math.log(0.8), math.log(0.2)]])
    # old probability 0.5 -> ratio 1.6, clipped to 1.2 for a positive advantage, not for a negative one
    old = torch.tensor([math.log(0.5)])
    entropy = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))
    loss = ppo_loss(logits, torch.tensor([0]), old, torch.tensor([1.0]), 0.2, 0.1)
    assert loss.item() == pytest.approx(-(1.2 + 0.1 * entropy), abs=1e-5)
    loss = ppo_loss(logits, torch.tensor([0]), old, torch.tensor([-1.0]), 0.2, 0.0)
    assert loss.item() == pytest.approx(1.6, abs=1e-5)
