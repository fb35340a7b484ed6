"""Metrics agree with scikit-learn on random data; the bootstrap is seeded and brackets the estimate."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

from factrl.eval.metrics import bootstrap_ci, bootstrap_mean_ci, classification_metrics

LABELS = ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]


@pytest.mark.parametrize("seed", range(12))
def test_agrees_with_sklearn_on_random_data(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    k = 2 if seed % 2 else 3
    y_true = list(rng.choice(LABELS[:k], size=n))
    y_pred = list(rng.choice(LABELS[:k], size=n))
    got = classification_metrics(y_true, y_pred)
    gold = sorted(set(y_true))
    kw = {"average": "weighted", "zero_division": 0}
    assert got["n"] == n
    assert got["accuracy"] == pytest.approx(accuracy_score(y_true, y_pred))
    assert got["precision_weighted"] == pytest.approx(precision_score(y_true, y_pred, **kw))
    assert got["recall_weighted"] == pytest.approx(recall_score(y_true, y_pred, **kw))
    assert got["f1_weighted"] == pytest.approx(f1_score(y_true, y_pred, **kw))
    assert got["f1_macro"] == pytest.approx(f1_score(y_true, y_pred, average="macro", labels=gold, zero_division=0))
    # as the HARIS authors report it: weighted recall is accuracy
    assert got["recall_weighted"] == pytest.approx(got["accuracy"])


def test_missing_verdicts_count_as_wrong_like_an_extra_class():
    y_true = ["SUPPORTS", "SUPPORTS", "REFUTES", "REFUTES", "REFUTES"]
    y_pred = ["SUPPORTS", None, "REFUTES", None, "SUPPORTS"]
    got = classification_metrics(y_true, y_pred)
    as_class = ["<none>" if p is None else p for p in y_pred]
    assert got["accuracy"] == pytest.approx(0.4)
    assert got["f1_weighted"] == pytest.approx(f1_score(y_true, as_class, average="weighted", zero_division=0))
    assert got["precision_weighted"] == pytest.approx(
        precision_score(y_true, as_class, average="weighted", zero_division=0))


def test_perfect_and_degenerate_predictions():
    assert classification_metrics(["SUPPORTS", "REFUTES"], ["SUPPORTS", "REFUTES"])["f1_weighted"] == 1.0
    all_sup = classification_metrics(["SUPPORTS", "REFUTES"], ["SUPPORTS", "SUPPORTS"])
    assert all_sup["accuracy"] == 0.5 and all_sup["precision_weighted"] == pytest.approx(0.25)


def test_input_errors():
    with pytest.raises(ValueError, match="y_true has 2 items but y_pred has 1"):
        classification_metrics(["SUPPORTS", "REFUTES"], ["SUPPORTS"])
    with pytest.raises(ValueError, match="no items"):
        classification_metrics([], [])
    with pytest.raises(ValueError, match="unknown metric"):
        bootstrap_ci(["SUPPORTS"], ["SUPPORTS"], "auc")


def test_bootstrap_is_seeded_and_brackets_the_point_estimate():
    rng = np.random.default_rng(7)
    y_true = list(rng.choice(LABELS[:2], size=500))
    y_pred = [t if rng.random() < 0.7 else ("REFUTES" if t == "SUPPORTS" else "SUPPORTS") for t in y_true]
    acc = classification_metrics(y_true, y_pred)["accuracy"]
    low, high = bootstrap_ci(y_true, y_pred, "accuracy", n_boot=1000, seed=3)
    assert (low, high) == bootstrap_ci(y_true, y_pred, "accuracy", n_boot=1000, seed=3)
    assert (low, high) != bootstrap_ci(y_true, y_pred, "accuracy", n_boot=1000, seed=4)
    assert low < acc < high
    # the normal-approximation half width for p ~ 0.7, n = 500 is ~0.040
    assert 0.06 < high - low < 0.10
    # the vectorised path equals resampling through the public function
    slow = bootstrap_ci(y_true, y_pred, lambda t, p: classification_metrics(t, p)["f1_weighted"], n_boot=200, seed=5)
    fast = bootstrap_ci(y_true, y_pred, "f1_weighted", n_boot=200, seed=5)
    assert fast == pytest.approx(slow)


def test_mean_interval_brackets_the_mean_and_resamples_as_the_metrics_do():
    values = np.random.default_rng(0).integers(0, 4, size=50)
    low, high = bootstrap_mean_ci(values, 500, 0)
    assert low <= values.mean() <= high and high - low < 1.5
    assert bootstrap_mean_ci([2, 2, 2], 100, 0) == (2.0, 2.0)
    # the mean of per-claim correctness is accuracy: the same resamples give the same interval
    correct = np.random.default_rng(1).random(40) < 0.6
    y_pred = ["SUPPORTS" if c else "REFUTES" for c in correct]
    assert bootstrap_mean_ci(correct, 300, 7) == bootstrap_ci(["SUPPORTS"] * 40, y_pred, "accuracy", 300, 7)


def test_paired_bootstrap_diff_counts_only_what_differs():
    from factrl.eval.metrics import paired_bootstrap_diff

    same = [1.0, 0.0, 1.0, 1.0, 0.0] * 20
    flat = paired_bootstrap_diff(same, same)
    assert flat["mean"] == 0.0 and flat["ci95"] == [0.0, 0.0] and flat["n"] == 100
    better = [1.0] * 100
    gain = paired_bootstrap_diff(better, same)  # 40 claims turned right, none turned wrong
    assert gain["mean"] == pytest.approx(0.4) and 0.25 < gain["ci95"][0] < 0.4 < gain["ci95"][1] < 0.55
    with pytest.raises(ValueError, match="paired"):
        paired_bootstrap_diff([1.0], [1.0, 0.0])
