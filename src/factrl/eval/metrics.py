"""Classification metrics as the HARIS paper reports them, and seeded bootstrap intervals (of these
metrics, and of the mean of per-claim counts).

HARIS reports accuracy and F1 per dataset and hop; its F1 is the support-weighted F1 (scikit-learn's
``average="weighted"``), so weighted recall equals accuracy. Macro F1 is reported too. Labels are
strings; a missing prediction (``None``, no verdict) counts as a wrong answer of its own class.

All metrics are computed from a confusion matrix over the gold label set, which makes the bootstrap
cheap: every resample is one ``bincount``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

METRICS = ("accuracy", "precision_weighted", "recall_weighted", "f1_weighted", "f1_macro")
NO_VERDICT = "<none>"


def _encode(y_true: Sequence, y_pred: Sequence) -> tuple[np.ndarray, np.ndarray, int]:
    """Integer codes: gold labels 0..K-1 (sorted), any other prediction K (one shared 'other' column)."""
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true has {len(y_true)} items but y_pred has {len(y_pred)}")
    if len(y_true) == 0:
        raise ValueError("no items to score")
    if any(t is None for t in y_true):
        raise ValueError("y_true contains None: every item needs a gold label")
    labels = sorted(set(y_true))
    code = {lab: i for i, lab in enumerate(labels)}
    k = len(labels)
    t = np.fromiter((code[y] for y in y_true), dtype=np.int64, count=len(y_true))
    p = np.fromiter((code.get(NO_VERDICT if y is None else y, k) for y in y_pred), dtype=np.int64, count=len(y_pred))
    return t, p, k


def _confusions(t: np.ndarray, p: np.ndarray, k: int) -> np.ndarray:
    """``t, p: [B, n]`` codes -> ``[B, K, K+1]`` confusion matrices (rows gold, columns predicted)."""
    b = t.shape[0]
    flat = (np.arange(b)[:, None] * (k * (k + 1)) + t * (k + 1) + p).ravel()
    return np.bincount(flat, minlength=b * k * (k + 1)).reshape(b, k, k + 1)


def _from_confusions(cm: np.ndarray) -> dict[str, np.ndarray]:
    """``[B, K, K+1]`` -> each metric as a ``[B]`` array (zero where a ratio is undefined, as sklearn)."""
    k = cm.shape[1]
    tp = cm[:, np.arange(k), np.arange(k)].astype(np.float64)  # [B, K]
    support = cm.sum(axis=2).astype(np.float64)  # gold count per class
    predicted = cm[:, :, :k].sum(axis=1).astype(np.float64)  # predicted count per gold class
    n = support.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(support > 0, tp / support, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    weights = support / n[:, None]
    present = support > 0  # a resample may miss a class: macro averages over the classes it has
    return {
        "accuracy": tp.sum(axis=1) / n,
        "precision_weighted": (precision * weights).sum(axis=1),
        "recall_weighted": (recall * weights).sum(axis=1),
        "f1_weighted": (f1 * weights).sum(axis=1),
        "f1_macro": (f1 * present).sum(axis=1) / present.sum(axis=1),
    }


def classification_metrics(y_true: Sequence[str], y_pred: Sequence[str | None]) -> dict[str, float]:
    """Accuracy, weighted precision / recall / F1, macro F1 (over the gold labels) and ``n``."""
    t, p, k = _encode(y_true, y_pred)
    scores = _from_confusions(_confusions(t[None, :], p[None, :], k))
    out = {name: float(v[0]) for name, v in scores.items()}
    out["n"] = len(t)
    return out


def _resamples(n: int, n_boot: int, seed: int) -> np.ndarray:
    """``[n_boot, n]`` item indices drawn with replacement from ``numpy.random.default_rng(seed)``."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def _percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1 - level) / 2
    low, high = np.quantile(values, [alpha, 1 - alpha])
    return float(low), float(high)


def bootstrap_ci(
    y_true: Sequence[str],
    y_pred: Sequence[str | None],
    metric: str | Callable[[list, list], float] = "accuracy",
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric`` (a name in :data:`METRICS` or a function).

    Resamples items with replacement ``n_boot`` times from ``numpy.random.default_rng(seed)``.
    """
    t, p, k = _encode(y_true, y_pred)
    idx = _resamples(len(t), n_boot, seed)
    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS} or a function")
        values = _from_confusions(_confusions(t[idx], p[idx], k))[metric]
    else:
        yt, yp = list(y_true), list(y_pred)
        values = np.array([metric([yt[i] for i in row], [yp[i] for i in row]) for row in idx])
    return _percentile_interval(values, level)


def bootstrap_mean_ci(values: Sequence[float], n_boot: int = 1000, seed: int = 0,
                      level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (per-claim counts such as questions
    asked), resampled exactly as :func:`bootstrap_ci` resamples items."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no items to score")
    return _percentile_interval(x[_resamples(len(x), n_boot, seed)].mean(axis=1), level)


def paired_bootstrap_diff(a: Sequence[float], b: Sequence[float], n_boot: int = 1000, seed: int = 0,
                          level: float = 0.95) -> dict[str, float | list[float] | int]:
    """Mean of ``a - b`` over the same items (``a[i]`` and ``b[i]`` are item ``i``'s scores under two
    systems, e.g. 1.0 for a right verdict) and its percentile bootstrap interval, resampling items,
    so what both systems get right or wrong alike adds no noise: ``{mean, ci95, n}``."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"need the same, non-zero number of paired items (got {x.size} and {y.size})")
    d = x - y
    low, high = _percentile_interval(d[_resamples(len(d), n_boot, seed)].mean(axis=1), level)
    return {"mean": float(d.mean()), "ci95": [low, high], "n": int(d.size)}

