"""The SC-MAKS paper's evaluation: its metrics beyond accuracy and F1, and its statistics over runs.

Metrics of one run (:func:`run_metrics`), for binary verdicts where ``None`` is no verdict:

* accuracy, weighted precision / recall / F1 and macro F1 (:func:`factrl.eval.metrics.classification_metrics`);
* factual consistency ratio (FCR): the share of outputs that agree with the gold label;
* hallucination rate (HR): the share of outputs that assert the wrong verdict (no verdict is an
  abstention, not a hallucination, so FCR + HR + abstentions = 1);
* cross-agent agreement rate (CAAR): the share of claims on which every member reached the same verdict.

Over runs (the paper's 5 folds x 3 seeds): :func:`summary` gives mean, sample std (ddof 1) and the
t-based 95% interval of the mean; :func:`paired_tests` compares two systems on the same runs with
the paired t-test and the Wilcoxon signed-rank test (scipy).

:func:`consensus_rows` scores the SC-MAKS stage's predictions (consensus/predictions.parquet) as rows
of stage ``evaluate``'s report.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from factrl.eval.metrics import classification_metrics


def factual_consistency_ratio(y_true: Sequence[str], y_pred: Sequence[str | None]) -> float:
    """Share of claims whose verdict equals the gold label."""
    return float(np.mean([p is not None and p == t for t, p in zip(y_true, y_pred, strict=True)]))


def hallucination_rate(y_true: Sequence[str], y_pred: Sequence[str | None]) -> float:
    """Share of claims given a verdict that contradicts the gold label (no verdict does not count)."""
    return float(np.mean([p is not None and p != t for t, p in zip(y_true, y_pred, strict=True)]))


def agreement_rate(stances: Sequence[Sequence[str | None]]) -> float:
    """Share of claims on which every member holds the same verdict (a member without one disagrees)."""
    return float(np.mean([None not in row and len(set(row)) == 1 for row in stances])) if len(stances) else 0.0


def run_metrics(y_true: Sequence[str], y_pred: Sequence[str | None],
                stances: Sequence[Sequence[str | None]] | None = None) -> dict[str, float]:
    """Every metric of one run; ``stances`` (``[C][n]`` the members' verdicts behind ``y_pred``) adds CAAR."""
    out = {k: float(v) for k, v in classification_metrics(y_true, y_pred).items() if k != "n"}
    out["fcr"] = factual_consistency_ratio(y_true, y_pred)
    out["hallucination_rate"] = hallucination_rate(y_true, y_pred)
    if stances is not None:
        out["caar"] = agreement_rate(stances)
    return out


def summary(values: Sequence[float], level: float = 0.95) -> dict:
    """``{"mean", "std", "ci95": [low, high], "n"}``: sample std (ddof 1) and the Student-t interval
    of the mean (a single value has std 0 and a degenerate interval)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("summary of no values")
    mean = float(x.mean())
    if x.size == 1:
        return {"mean": mean, "std": 0.0, "ci95": [mean, mean], "n": 1}
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, df=x.size - 1)) * std / np.sqrt(x.size)
    return {"mean": mean, "std": std, "ci95": [mean - half, mean + half], "n": int(x.size)}


def paired_tests(a: Sequence[float], b: Sequence[float]) -> dict:
    """``a`` against ``b`` on the same runs: mean difference, paired t-test and Wilcoxon signed-rank
    (two-sided). Identical samples give statistic 0 and p = 1, a constant difference a t-test p of 0
    (scipy leaves both undefined)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"paired tests need two samples of the same length >= 2, got {x.size} and {y.size}")
    diff = x - y
    out = {"mean_diff": float(diff.mean()), "n": int(x.size)}
    if np.allclose(diff, 0.0):
        return out | {"t_statistic": 0.0, "t_pvalue": 1.0, "wilcoxon_statistic": 0.0, "wilcoxon_pvalue": 1.0}
    if np.allclose(diff, diff[0]):  # a constant non-zero difference: t is infinite (None in JSON), p = 0
        t_stat, t_p = None, 0.0
    else:
        t = stats.ttest_rel(x, y)
        t_stat, t_p = float(t.statistic), float(t.pvalue)
    w = stats.wilcoxon(x, y)
    return out | {"t_statistic": t_stat, "t_pvalue": t_p, "wilcoxon_statistic": float(w.statistic),
                  "wilcoxon_pvalue": float(w.pvalue)}


# Report names of the consensus systems (factrl.recipes.scmaks.SYSTEMS).
CONSENSUS_NAMES = {"scmaks": "SC-MAKS", "majority_vote": "Majority vote", "uniform_vote": "Uniform vote",
                   "best_single": "Best single member"}


def consensus_rows(path: str | Path, *, n_boot: int, seed: int, dataset: str = "demo_debate") -> list[dict]:
    """METRICS rows (per system and hop, with bootstrap intervals) of the consensus predictions in
    ``path`` (CONSENSUS_PREDICTIONS); no rows when the file does not exist or is empty."""
    import pyarrow.parquet as pq

    from factrl.data.schemas import CONSENSUS_PREDICTIONS, validate
    from factrl.eval.runner import score_rows

    path = Path(path)
    if not path.exists():
        return []
    rows = validate(pq.read_table(path), CONSENSUS_PREDICTIONS, str(path)).to_pylist()
    out = []
    for system, name in CONSENSUS_NAMES.items():
        mine = [r for r in rows if r["system"] == system]
        for hop in sorted({r["num_hops"] for r in mine}, key=lambda h: (h is None, h or 0)):
            cell = [r for r in mine if r["num_hops"] == hop]
            out += score_rows(dataset, name, hop, [r["label"] for r in cell], [r["verdict"] for r in cell],
                              [0] * len(cell), [0] * len(cell), n_boot=n_boot, seed=seed)
    return out
