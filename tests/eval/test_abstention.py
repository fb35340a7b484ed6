"""evaluate's abstention metrics (factrl.eval.abstention) against a hand-computed case."""

from __future__ import annotations

import pytest

from factrl.agents.abstain import AbstainParams, CitedSentence, grounding
from factrl.eval.abstention import abstention_metrics, abstention_rows, apply_abstention
from factrl.verdicts import NOT_ENOUGH_INFO as NEI

S, R = "SUPPORTS", "REFUTES"


def pred(label, verdict, outcome, confidence):
    return {"dataset": "demo", "system": "HARIS", "num_hops": None, "label": label, "verdict": verdict, "outcome": outcome,
            "confidence": confidence, "raw_confidence": confidence, "abstained": outcome == NEI}


def test_coverage_accuracy_and_risk_coverage_by_hand():
    # six in-corpus claims: four answered (three right), two abstained (one of them the model had right);
    # two out-of-corpus claims: one abstained
    preds = [pred(S, S, S, 0.9), pred(R, R, R, 0.8), pred(S, R, R, 0.8), pred(R, R, R, 0.6),
             pred(S, S, NEI, 0.7), pred(R, S, NEI, 0.5),
             pred(NEI, S, NEI, 0.9), pred(NEI, R, R, 0.7)]
    m = abstention_metrics(preds)
    assert m["in_corpus"] == {"n": 6, "coverage": pytest.approx(4 / 6), "accuracy_answered": pytest.approx(3 / 4),
                              "accuracy_all": pytest.approx(4 / 6)}
    assert m["out_of_corpus"] == {"n": 2, "nei_rate": 0.5}
    # answered by confidence: 0.9 right; 0.8 right + 0.8 wrong (together); 0.6 right
    assert m["risk_coverage"] == [
        {"threshold": 0.9, "coverage": pytest.approx(1 / 6), "risk": 0.0, "answered": 1},
        {"threshold": 0.8, "coverage": pytest.approx(3 / 6), "risk": pytest.approx(1 / 3), "answered": 3},
        {"threshold": 0.6, "coverage": pytest.approx(4 / 6), "risk": pytest.approx(1 / 4), "answered": 4}]
    rows = {r["metric"]: r["value"] for r in abstention_rows(preds) if r["num_hops"] is None}
    assert rows == {"coverage": pytest.approx(4 / 6), "accuracy_answered": pytest.approx(3 / 4), "nei_rate": 0.5}


def test_apply_abstention_decides_on_the_calibrated_confidence():
    g = grounding("Orlen Studios is based in Varna.", [CitedSentence("Orlen Studios is based in Tessik.",
                                                                    "Orlen Studios", "Where is Orlen Studios?")],
                  ["Where is Orlen Studios?"])
    preds = [{"verdict": R, "grounding": g, "raw_confidence": 0.99, "confidence": 0.4},
             {"verdict": R, "grounding": g.to_dict(), "raw_confidence": 0.99, "confidence": None},
             {"verdict": S, "grounding": None, "raw_confidence": None, "confidence": None}]
    apply_abstention(preds, AbstainParams(min_confidence=0.5, min_read_share=0.0))  # no passages read here
    assert [(p["outcome"], p["abstained"]) for p in preds] == [(NEI, True), (R, False), (S, None)]
