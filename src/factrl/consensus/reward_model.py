"""SC-MAKS's reward model: a feedforward network from one member's debate features on one claim to
the probability that its final verdict is right (alignment with the gold label).

Inputs (:func:`model_inputs`): the claim-member features of :mod:`factrl.consensus.features`,
standardised with the training claims' mean and std, followed by a one-hot of the member (the pool is
fixed, so a member's own reliability is learnable). The network is trained with binary cross-entropy
on the training claims, full batch, and stops when the validation loss has not improved for
``patience`` epochs; the best epoch's weights are kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from factrl.consensus.features import FeatureSet
from factrl.consensus.params import RewardModelParams


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread for the block: these networks have a few thousand weights, and
    intra-op threads only add synchronisation (measured ~10x slower with 2 threads on a busy 2-core CPU)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int = 1) -> nn.Sequential:
    """``[..., in_dim] -> [..., out_dim]``: Linear + ReLU per hidden width, then a Linear head."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


@dataclass
class Scaler:
    """Per-feature standardisation fitted on training rows (a zero std leaves the feature centred)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray) -> Scaler:
        """``x``: ``[..., F]``; statistics over every leading axis."""
        flat = x.reshape(-1, x.shape[-1])
        std = flat.std(axis=0)
        return cls(flat.mean(axis=0), np.where(std > 1e-8, std, 1.0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mean) / self.std


def model_inputs(fs: FeatureSet, scaler: Scaler) -> torch.Tensor:
    """``[C, n, F + n]`` float32: standardised features, then the member's one-hot."""
    c, n, _ = fs.x.shape
    onehot = np.broadcast_to(np.eye(n), (c, n, n))
    return torch.tensor(np.concatenate([scaler(fs.x), onehot], axis=-1), dtype=torch.float32)


@dataclass
class FitHistory:
    """Per-epoch losses and where training stopped."""

    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    best_epoch: int = -1


def fit_classifier(x_train: torch.Tensor, y_train: torch.Tensor, x_val: torch.Tensor, y_val: torch.Tensor,
                   params: RewardModelParams, seed: int = 0) -> tuple[nn.Module, FitHistory]:
    """An MLP ``[N, D] -> [N]`` logits fitted with BCE (full batch, Adam), early-stopped on the
    validation loss (training loss when there is no validation row); the best epoch's weights."""
    with one_thread():
        return _fit_classifier(x_train, y_train, x_val, y_val, params, seed)


def _fit_classifier(x_train: torch.Tensor, y_train: torch.Tensor, x_val: torch.Tensor, y_val: torch.Tensor,
                    params: RewardModelParams, seed: int) -> tuple[nn.Module, FitHistory]:
    torch.manual_seed(seed)
    net = mlp(x_train.shape[-1], tuple(params.hidden))
    opt = torch.optim.Adam(net.parameters(), lr=params.lr, weight_decay=params.weight_decay)
    loss_fn = nn.BCEWithLogitsLoss()
    history = FitHistory()
    best, best_state, waited = float("inf"), None, 0
    for epoch in range(params.epochs):
        net.train()
        opt.zero_grad()
        loss = loss_fn(net(x_train).squeeze(-1), y_train)
        loss.backward()
        opt.step()
        net.eval()
        with torch.no_grad():
            monitored = loss_fn(net(x_val).squeeze(-1), y_val).item() if len(y_val) else \
                loss_fn(net(x_train).squeeze(-1), y_train).item()
        history.train_loss.append(loss.item())
        history.val_loss.append(monitored)
        if monitored < best - 1e-6:
            best, waited, history.best_epoch = monitored, 0, epoch
            best_state = {k: v.clone() for k, v in net.state_dict().items()}
        else:
            waited += 1
            if waited >= params.patience:
                break
    if best_state is not None:
        net.load_state_dict(best_state)
    net.eval()
    return net, history


@dataclass
class RewardModel:
    """A fitted reward model: :meth:`score` gives ``[C, n]`` probabilities that each member is right."""

    net: nn.Module
    scaler: Scaler
    members: list[str]
    hidden: tuple[int, ...]
    history: FitHistory

    def score(self, fs: FeatureSet) -> np.ndarray:
        if fs.members != self.members:
            raise ValueError(f"reward model fitted for members {self.members}, got {fs.members}")
        with torch.no_grad():
            return torch.sigmoid(self.net(model_inputs(fs, self.scaler)).squeeze(-1)).numpy()

    def save(self, path: str | Path) -> None:
        from factrl.io import atomic_path

        with atomic_path(path) as tmp:
            torch.save({"state_dict": self.net.state_dict(), "mean": self.scaler.mean, "std": self.scaler.std,
                        "members": self.members, "hidden": list(self.hidden), "best_epoch": self.history.best_epoch,
                        "val_loss": self.history.val_loss}, tmp)


def fit_reward_model(train: FeatureSet, val: FeatureSet, params: RewardModelParams, seed: int = 0) -> RewardModel:
    """Fit on ``train``'s (claim, member) rows against ``correct``; early stopping on ``val``."""
    scaler = Scaler.fit(train.x)

    def xy(fs: FeatureSet) -> tuple[torch.Tensor, torch.Tensor]:
        x = model_inputs(fs, scaler)
        return x.reshape(-1, x.shape[-1]), torch.tensor(fs.correct.reshape(-1), dtype=torch.float32)

    net, history = fit_classifier(*xy(train), *xy(val), params, seed)
    return RewardModel(net, scaler, list(train.members), tuple(params.hidden), history)


def auc(scores: np.ndarray, positives: np.ndarray) -> float | None:
    """Area under the ROC curve (the Mann-Whitney statistic, ties counted half); None without both classes."""
    from scipy.stats import rankdata

    pos = np.asarray(positives, dtype=bool).reshape(-1)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(np.asarray(scores).reshape(-1))
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
