"""The consensus reward model fits a separable signal; its AUC is scikit-learn's."""

from __future__ import annotations

import numpy as np
import pytest

from factrl.consensus.features import FEATURES
from factrl.consensus.params import RewardModelParams
from factrl.consensus.reward_model import auc, fit_reward_model
from tests.consensus.synthetic import FLIP, pool


def separable(n_claims: int, seed: int, split: str):
    """Each member is right exactly when its feature ``citations`` is positive (others are noise)."""
    fs = pool(n_claims, always_right=None, seed=seed, split=split)
    cite = FEATURES.index("citations")
    for c, label in enumerate(fs.labels):
        for i in range(len(fs.members)):
            fs.stance[c][i] = label if fs.x[c, i, cite] > 0 else FLIP[label]
    return fs


def test_reward_model_fits_a_separable_signal():
    train, val, test = separable(200, 0, "train"), separable(60, 1, "dev"), separable(100, 2, "eval")
    rm = fit_reward_model(train, val, RewardModelParams(), seed=0)
    scores = rm.score(test)
    assert scores.shape == (100, 3) and ((scores >= 0) & (scores <= 1)).all()
    assert auc(scores, test.correct) > 0.9
    assert 0 <= rm.history.best_epoch < len(rm.history.val_loss)


def test_untrained_reward_model_does_not_separate():
    """What the fit above is measured against: no epoch, no signal."""
    train, val, test = separable(200, 0, "train"), separable(60, 1, "dev"), separable(100, 2, "eval")
    rm = fit_reward_model(train, val, RewardModelParams(epochs=0), seed=0)
    assert abs(auc(rm.score(test), test.correct) - 0.5) < 0.2


def test_auc_is_sklearns():
    sklearn = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(3)
    scores = np.round(rng.random(50), 1)  # ties included
    y = rng.random(50) < 0.4
    assert auc(scores, y) == pytest.approx(sklearn.roc_auc_score(y, scores))
    assert auc(scores, np.ones(50, bool)) is None
