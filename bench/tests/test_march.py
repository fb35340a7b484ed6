"""bench/march.py's summary: the issue's keys over seeds, and goals that cannot pass vacuously."""

from __future__ import annotations

import json

import pytest

from bench import march


def _run(before: tuple[float, float], after: tuple[float, float], proposals: list[float]) -> dict:
    """One seed's results: (hallucination rate, accuracy) before and after, proposals per step."""
    def side(h, a):
        return {"hallucination_rate": h, "accuracy": a, "proposals_per_answer": 1.0}
    return {"before": side(*before), "after": side(*after), "training": {"proposals_per_answer": proposals}}


def test_summary_has_the_issues_keys():
    runs = [_run((0.4, 0.6), (0.1, 0.7), [1.0, 1.0, 1.2]), _run((0.2, 0.5), (0.1, 0.5), [1.0, 0.8, 1.0])]
    out = march.aggregate(runs)
    assert out["hallucination_rate"]["before"] == pytest.approx(0.3)
    assert out["hallucination_rate"]["after"] == pytest.approx(0.1)
    assert set(out["accuracy"]["spread"]) >= {"before", "after", "change", "seeds"}
    assert out["proposals_per_answer"] == pytest.approx([1.0, 0.9, 1.1])
    assert out["goal"] == {"hallucination_halved": True, "hallucination_before_is_zero": False,
                           "accuracy_not_lower": True, "proposals_not_falling": True}


def test_no_hallucination_to_halve_is_not_a_pass():
    """A policy at 0 before training that stays at 0 has shown nothing (the first bench run's case)."""
    out = march.aggregate([_run((0.0, 0.8), (0.0, 0.4), [1.0, 1.0])])
    assert out["goal"]["hallucination_halved"] is False and out["goal"]["hallucination_before_is_zero"]
    assert out["goal"]["accuracy_not_lower"] is False


def test_reaggregate_rewrites_only_the_summaries(tmp_path):
    path = tmp_path / "march.json"
    runs = [_run((0.0, 0.8), (0.0, 0.4), [1.0])]
    path.write_text(json.dumps({"commit": "abc", "per_seed": {"warmup": runs, "without_warmup": runs},
                                "goal": {"hallucination_halved": True}}))
    march.reaggregate(path)
    out = json.loads(path.read_text())
    assert out["commit"] == "abc" and out["per_seed"]["warmup"] == runs
    assert out["goal"]["hallucination_halved"] is False
    assert out["without_warmup"]["goal"]["hallucination_halved"] is False


def test_rates_by_kind_are_averaged_over_the_seeds_that_have_them():
    def side(h_ans, h_un):
        return {"hallucination_by_kind": {"answerable": h_ans, "unanswerable": h_un},
                "accuracy_by_kind": {"answerable": 0.5, "unanswerable": None if h_un is None else 1 - h_un}}

    runs = [_run((0.2, 0.5), (0.1, 0.5), [1.0]), _run((0.4, 0.5), (0.0, 0.5), [1.0])]
    for run, (before, after) in zip(runs, [((0.0, 0.8), (0.0, 0.2)), ((0.1, None), (0.0, None))]):
        run["before"] |= side(*before)
        run["after"] |= side(*after)
    out = march.aggregate(runs)
    assert out["hallucination_by_kind"]["answerable"] == pytest.approx({"before": 0.05, "after": 0.0})
    assert out["hallucination_by_kind"]["unanswerable"] == pytest.approx({"before": 0.8, "after": 0.2})
    assert out["accuracy_by_kind"]["unanswerable"]["before"] == pytest.approx(0.2)
    assert "hallucination_by_kind" not in march.aggregate([_run((0.2, 0.5), (0.1, 0.5), [1.0])])
