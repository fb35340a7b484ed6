"""SC-MAKS's consensus policy w_i(Q; theta), trained with PPO against the reward model, and the
weighted vote that turns its weights into the final verdict.

The policy scores every member of a claim with a small network over that member's model inputs
(:func:`factrl.consensus.reward_model.model_inputs`) and takes a softmax over the claim's members:
``weights [C, n]``. Read as a distribution, it picks the member whose answer becomes the output; the
reward of picking member i on claim Q is the reward model's probability that i is right, r(Q, i).

Training, as the paper's Section 3.5 has it:

1. heuristic pre-training: cross-entropy towards softmax(historical accuracy / T), the paper's
   weighting by each agent's past accuracy;
2. PPO: each iteration samples members from the current (old) policy, takes the advantage
   A = r(Q, a) - sum_i w_i(Q) r(Q, i) (the exact expected reward as baseline, normalised over the
   batch), and runs ``ppo_epochs`` updates of the clipped objective
   -min(rho A, clip(rho, 1 - eps, 1 + eps) A) - beta H(w(Q)), rho = w_a(Q; theta) / w_a(Q; theta_old);
   it stops when the validation reward E_w[r] has not improved for ``patience`` iterations, and keeps
   the best iteration's weights.

The final verdict is the weighted vote argmax_v sum_i w_i [stance_i = v] (:func:`weighted_vote`).
Consensus ablations (``ABLATIONS``): ``uniform_vote`` (w_i = 1/n), ``no_rlhf`` (pre-training only).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from factrl.consensus.params import AggregatorParams
from factrl.consensus.reward_model import mlp, one_thread

ABLATIONS = {
    "uniform_vote": "the learned weights are replaced by w_i = 1/n (majority over the final stances)",
    "no_rlhf": "the weights stay as heuristic pre-training left them; no PPO",
}


class Policy(nn.Module):
    """``[C, n, D]`` model inputs -> ``[C, n]`` logits of w_i(Q; theta) (softmax over members)."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.hidden = tuple(hidden)
        self.scorer = mlp(in_dim, self.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scorer(x).squeeze(-1)

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """``[C, n]`` w_i(Q; theta), each row summing to 1."""
        return torch.softmax(self(x), dim=-1)


@dataclass
class PPOHistory:
    """What training did: pre-training loss, per-iteration PPO loss, validation reward, stop point."""

    pretrain_loss: list[float] = field(default_factory=list)
    ppo_loss: list[float] = field(default_factory=list)
    val_reward: list[float] = field(default_factory=list)
    best_iteration: int = -1


def heuristic_target(history: np.ndarray, temperature: float) -> torch.Tensor:
    """``[n]`` historical accuracies -> ``[n]`` softmax(acc / T): the paper's reliability weights."""
    return torch.softmax(torch.tensor(history, dtype=torch.float32) / max(temperature, 1e-6), dim=-1)


def pretrain(policy: Policy, x: torch.Tensor, target: torch.Tensor, params: AggregatorParams) -> list[float]:
    """Cross-entropy of the policy's weights ``[C, n]`` towards ``target`` ``[n]`` (every claim)."""
    opt = torch.optim.Adam(policy.parameters(), lr=params.lr)
    losses = []
    for _ in range(params.pretrain_steps):
        opt.zero_grad()
        loss = -(target[None, :] * torch.log_softmax(policy(x), dim=-1)).sum(-1).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def expected_reward(policy: Policy, x: torch.Tensor, rewards: torch.Tensor) -> float:
    """Mean over claims of sum_i w_i(Q) r(Q, i); ``x`` ``[C, n, D]``, ``rewards`` ``[C, n]``."""
    if len(x) == 0:
        return float("nan")
    with torch.no_grad():
        return float((policy.weights(x) * rewards).sum(-1).mean())


def ppo_loss(logits: torch.Tensor, actions: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
             clip_ratio: float, entropy_coef: float) -> torch.Tensor:
    """The clipped PPO objective with an entropy bonus, as a loss to minimise.

    logits ``[B, n]`` (the claim of each sample), actions ``[B]`` (chosen member), old_logp ``[B]``,
    advantages ``[B]``.
    """
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, actions[:, None]).squeeze(-1)
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - clip_ratio, 1 + clip_ratio)
    objective = torch.minimum(ratio * advantages, clipped * advantages).mean()
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    return -(objective + entropy_coef * entropy)


def train_ppo(policy: Policy, x: torch.Tensor, rewards: torch.Tensor, x_val: torch.Tensor, rewards_val: torch.Tensor,
              params: AggregatorParams, seed: int = 0, history: PPOHistory | None = None) -> PPOHistory:
    """PPO of ``policy`` against the reward model's ``rewards`` ``[C, n]`` on the training claims
    ``x`` ``[C, n, D]``; early stopping on the validation reward (the training reward without
    validation claims). The best iteration's weights are loaded back."""
    history = history or PPOHistory()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(policy.parameters(), lr=params.lr)
    has_val = len(x_val) > 0

    def monitor() -> float:
        return expected_reward(policy, x_val, rewards_val) if has_val else expected_reward(policy, x, rewards)

    best, best_state, waited = monitor(), copy.deepcopy(policy.state_dict()), 0
    for it in range(params.iterations):
        take = len(x) if params.claims_per_iteration <= 0 else min(params.claims_per_iteration, len(x))
        claims = torch.randperm(len(x), generator=gen)[:take]
        xb, rb = x[claims], rewards[claims]
        with torch.no_grad():
            old_logp_all = torch.log_softmax(policy(xb), dim=-1)  # [B, n]
            probs = old_logp_all.exp()
            actions = torch.multinomial(probs, params.samples_per_claim, replacement=True, generator=gen)  # [B, S]
            baseline = (probs * rb).sum(-1, keepdim=True)  # [B, 1] the exact expected reward
            adv = rb.gather(-1, actions) - baseline  # [B, S]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8) if adv.numel() > 1 else adv
            old_logp = old_logp_all.gather(-1, actions)  # [B, S]
        rows = torch.arange(len(xb)).repeat_interleave(params.samples_per_claim)
        for _ in range(params.ppo_epochs):
            opt.zero_grad()
            loss = ppo_loss(policy(xb)[rows], actions.reshape(-1), old_logp.reshape(-1), adv.reshape(-1),
                            params.clip_ratio, params.entropy_coef)
            loss.backward()
            opt.step()
        history.ppo_loss.append(loss.item())
        reward = monitor()
        history.val_reward.append(reward)
        if reward > best + 1e-6:
            best, best_state, waited, history.best_iteration = reward, copy.deepcopy(policy.state_dict()), 0, it
        else:
            waited += 1
            if waited >= params.patience:
                break
    policy.load_state_dict(best_state)
    return history


@dataclass
class Aggregator:
    """A fitted consensus policy, or uniform weights (``policy`` None: the uniform_vote ablation)."""

    policy: Policy | None
    members: list[str]
    history: PPOHistory

    def weights(self, x: torch.Tensor) -> np.ndarray:
        """``[C, n]`` w_i(Q) for model inputs ``x`` ``[C, n, D]``."""
        if self.policy is None:
            return np.full(tuple(x.shape[:2]), 1.0 / x.shape[1])
        with torch.no_grad():
            return self.policy.weights(x).numpy()

    def save(self, path: str | Path) -> None:
        from factrl.io import atomic_path

        state = None if self.policy is None else self.policy.state_dict()
        hidden = None if self.policy is None else list(self.policy.hidden)
        with atomic_path(path) as tmp:
            torch.save({"state_dict": state, "hidden": hidden, "members": self.members,
                        "val_reward": self.history.val_reward, "best_iteration": self.history.best_iteration}, tmp)


def fit_aggregator(x: torch.Tensor, rewards: np.ndarray, x_val: torch.Tensor, rewards_val: np.ndarray,
                   history_accuracy: np.ndarray, members: Sequence[str], params: AggregatorParams, *,
                   seed: int = 0, ablations: Sequence[str] = ()) -> Aggregator:
    """Pre-train towards historical accuracy, then PPO against ``rewards`` (unless ``no_rlhf``);
    ``uniform_vote`` skips both and weighs every member 1/n."""
    unknown = [a for a in ablations if a not in ABLATIONS]
    if unknown:
        raise ValueError(f"unknown consensus ablation(s) {unknown}; known: {sorted(ABLATIONS)}")
    with one_thread():
        return _fit_aggregator(x, rewards, x_val, rewards_val, history_accuracy, members, params, seed, ablations)


def _fit_aggregator(x: torch.Tensor, rewards: np.ndarray, x_val: torch.Tensor, rewards_val: np.ndarray,
                    history_accuracy: np.ndarray, members: Sequence[str], params: AggregatorParams, seed: int,
                    ablations: Sequence[str]) -> Aggregator:
    history = PPOHistory()
    if "uniform_vote" in ablations:
        return Aggregator(None, list(members), history)
    torch.manual_seed(seed)
    policy = Policy(x.shape[-1], tuple(params.hidden))
    history.pretrain_loss = pretrain(policy, x, heuristic_target(history_accuracy, params.heuristic_temperature),
                                     params)
    if "no_rlhf" not in ablations:
        train_ppo(policy, x, torch.tensor(rewards, dtype=torch.float32), x_val,
                  torch.tensor(rewards_val, dtype=torch.float32), params, seed, history)
    policy.eval()
    return Aggregator(policy, list(members), history)


def weighted_vote(stances: Sequence[Sequence[str | None]], weights: np.ndarray) -> list[str | None]:
    """argmax_v sum_i w_i [stance_i = v] per claim; a tie goes to the verdict of the heaviest member
    holding one of the tied verdicts; None when no member has a stance. ``weights`` ``[C, n]``."""
    out: list[str | None] = []
    for row, w in zip(stances, weights):
        totals: dict[str, float] = {}
        for v, wi in zip(row, w):
            if v is not None:
                totals[v] = totals.get(v, 0.0) + float(wi)
        if not totals:
            out.append(None)
            continue
        top = max(totals.values())
        tied = {v for v, t in totals.items() if abs(t - top) <= 1e-9}
        order = sorted(range(len(row)), key=lambda i: (-float(w[i]), i))
        out.append(next(row[i] for i in order if row[i] in tied))
    return out
