"""SC-MAKS's evaluation statistics agree with scipy on fixed inputs; its metrics; the CV splits."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats as sp

from factrl.data.splits import cv_splits
from factrl.eval.stats import (
    agreement_rate,
    factual_consistency_ratio,
    hallucination_rate,
    paired_tests,
    run_metrics,
    summary,
)

A = [0.61, 0.58, 0.66, 0.70, 0.55, 0.63, 0.59, 0.68, 0.64, 0.60, 0.57, 0.65, 0.62, 0.69, 0.56]
B = [0.57, 0.59, 0.60, 0.66, 0.50, 0.61, 0.58, 0.62, 0.60, 0.55, 0.58, 0.60, 0.57, 0.64, 0.55]


def test_summary_agrees_with_scipy():
    s = summary(A)
    assert s["mean"] == pytest.approx(np.mean(A)) and s["n"] == 15
    assert s["std"] == pytest.approx(np.std(A, ddof=1))
    low, high = sp.t.interval(0.95, df=14, loc=np.mean(A), scale=sp.sem(A))
    assert s["ci95"] == pytest.approx([low, high])
    assert summary([0.5]) == {"mean": 0.5, "std": 0.0, "ci95": [0.5, 0.5], "n": 1}


def test_paired_tests_agree_with_scipy():
    t = paired_tests(A, B)
    ref_t, ref_w = sp.ttest_rel(A, B), sp.wilcoxon(A, B)
    assert t["t_statistic"] == pytest.approx(ref_t.statistic) and t["t_pvalue"] == pytest.approx(ref_t.pvalue)
    assert t["wilcoxon_statistic"] == pytest.approx(ref_w.statistic)
    assert t["wilcoxon_pvalue"] == pytest.approx(ref_w.pvalue)
    assert t["mean_diff"] == pytest.approx(np.mean(A) - np.mean(B)) and t["t_pvalue"] < 0.05
    # a textbook value: paired differences 1, 2, 3, 4, 5 -> t = 3 / (sqrt(2.5) / sqrt(5)) = 4.2426
    assert paired_tests([2, 4, 6, 8, 10], [1, 2, 3, 4, 5])["t_statistic"] == pytest.approx(4.242640687)


def test_paired_tests_degenerate_samples():
    same = paired_tests(A, A)
    assert same["t_pvalue"] == 1.0 and same["wilcoxon_pvalue"] == 1.0
    shifted = paired_tests([x + 0.1 for x in A], A)
    assert shifted["t_statistic"] is None and shifted["t_pvalue"] == 0.0
    with pytest.raises(ValueError, match="same length"):
        paired_tests(A, B[:3])


def test_paper_metrics():
    y = ["SUPPORTS", "SUPPORTS", "REFUTES", "REFUTES"]
    p = ["SUPPORTS", "REFUTES", None, "REFUTES"]
    assert factual_consistency_ratio(y, p) == 0.5 and hallucination_rate(y, p) == 0.25
    assert agreement_rate([["S", "S"], ["S", "R"], ["S", None], ["R", "R"]]) == 0.5
    m = run_metrics(y, p, [["S", "S"]] * 4)
    assert m["accuracy"] == 0.5 and m["fcr"] == 0.5 and m["caar"] == 1.0 and "f1_weighted" in m
    assert "caar" not in run_metrics(y, p)


def test_cv_splits_are_stratified_70_15_15_with_disjoint_test_folds():
    labels = ["S"] * 40 + ["R"] * 20
    runs = cv_splits(labels, folds=5, seeds=(0, 1, 2), fractions=(0.7, 0.15, 0.15))
    assert [(s, f) for s, f, *_ in runs] == [(s, f) for s in (0, 1, 2) for f in range(5)]
    for _, _, train, val, test in runs:
        assert sorted(train + val + test) == list(range(60))
        assert (len(train), len(val), len(test)) == (42, 9, 9)
        assert Counter(labels[i] for i in test) == {"S": 6, "R": 3}  # the label mix of the whole set
    for seed in (0, 1, 2):
        tests = [set(t) for s, _, _, _, t in runs if s == seed]
        assert all(not a & b for i, a in enumerate(tests) for b in tests[i + 1 :])
    assert runs[0][4] != runs[5][4]  # another seed, another shuffle
    with pytest.raises(ValueError, match="overlap"):
        cv_splits(labels, folds=7, seeds=(0,), fractions=(0.7, 0.15, 0.15))
