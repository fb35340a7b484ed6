"""Debate features from a hand-written transcript: critiques, flips, citations, agreement, history."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from factrl.consensus.features import (
    FEATURES,
    UNKNOWN_HISTORY,
    debate_features,
    feature_table,
    revision_sentiment,
)
from factrl.data.schemas import CONSENSUS_FEATURES, DEBATE_TURNS

S, R = "SUPPORTS", "REFUTES"


def turn(cid, split, label, rnd, phase, member, stance, *, verdict="same", valid=True, cited=(), addressed=(),
         text="", sample=0):
    return {"claim_id": cid, "claim": f"claim {cid}", "split": split, "label": label, "num_hops": 2,
            "evidence_ids": ["p1", "p2"], "round": rnd, "phase": phase, "member": member, "system": "rag",
            "model": "m", "sample": sample, "verdict": stance if verdict == "same" else verdict, "stance": stance,
            "text": text, "format_valid": valid, "error": None if valid else "bad", "cited": list(cited),
            "addressed": list(addressed), "prompt_tokens": 10}


@pytest.fixture
def transcript():
    rows = [
        # claim a (train, SUPPORTS): A right throughout; B flips to right; C wrong, one malformed turn
        turn("a", "train", S, 0, "generate", "A", S), turn("a", "train", S, 0, "generate", "B", R),
        turn("a", "train", S, 0, "generate", "C", R),
        turn("a", "train", S, 0, "sample", "A", None, verdict=S, sample=1),
        turn("a", "train", S, 0, "sample", "A", None, verdict=R, sample=2),
        turn("a", "train", S, 1, "cooperative", "A", S, cited=["p1", "p2"], addressed=["B", "C"],
             text="B is wrong, I agree with p1."),
        turn("a", "train", S, 1, "cooperative", "B", S, addressed=["A"], text="A is right."),
        turn("a", "train", S, 1, "cooperative", "C", R, verdict=None, valid=False, text="???"),
        turn("a", "train", S, 2, "adversarial", "A", S, cited=["p1"], text="Still right."),
        turn("a", "train", S, 2, "adversarial", "B", S, addressed=["C"], text="C is wrong."),
        turn("a", "train", S, 2, "adversarial", "C", R, addressed=["A"], text="A is wrong."),
        turn("a", "train", S, 2, "summary", "summarizer", None, text="..."),
        # claim b (eval, REFUTES): everyone says REFUTES from the start
        *[turn("b", "eval", R, k, ph, m, R) for k, ph in ((0, "generate"), (1, "cooperative"), (2, "adversarial"))
          for m in "ABC"],
    ]
    return pa.Table.from_pylist(rows, schema=DEBATE_TURNS)


def test_features_of_a_known_debate(transcript):
    fs = debate_features(transcript)
    assert fs.members == ["A", "B", "C"] and fs.claim_ids == ["a", "b"]
    assert fs.opening[0] == [S, R, R] and fs.stance[0] == [S, S, R]
    assert fs.correct.tolist() == [[True, True, False], [True, True, True]]
    f = {name: fs.x[0, :, i] for i, name in enumerate(FEATURES)}
    assert f["critiques_given"].tolist() == pytest.approx([0.5, 0.5, 0.25])  # mean over rounds of named / 2
    assert f["critiques_received"].tolist() == pytest.approx([0.5, 0.25, 0.5])
    assert f["flips"].tolist() == [0.0, 0.5, 0.0] and f["revised"].tolist() == [0.0, 1.0, 0.0]
    assert f["citations"][0] == pytest.approx(np.log1p(2)) and f["citations"][1] == 0.0
    assert f["agreement"].tolist() == [0.5, 0.5, 0.0] and f["opening_agreement"].tolist() == [0.0, 0.5, 0.5]
    assert f["self_consistency"][0] == pytest.approx(2 / 3) and f["self_consistency"][1] == 1.0
    assert f["format_failures"].tolist() == pytest.approx([0.0, 0.0, 1 / 3])
    assert f["stance_sign"].tolist() == [1.0, 1.0, -1.0] and f["has_verdict"].tolist() == [1.0, 1.0, 1.0]
    assert f["revision_sentiment"].tolist() == pytest.approx([0.25, 0.0, -0.25])
    assert (fs.x[:, :, FEATURES.index("historical_accuracy")] == UNKNOWN_HISTORY).all()


def test_history_comes_from_the_training_claims_only(transcript):
    fs = debate_features(transcript)
    hist = fs.with_history(fs.split_indices("train")).x[:, :, FEATURES.index("historical_accuracy")]
    assert hist[0].tolist() == hist[1].tolist() == [1.0, 1.0, 0.0]  # claim b (eval) does not count
    table = feature_table(fs)
    assert table.schema == CONSENSUS_FEATURES and table.num_rows == 6


def test_revision_sentiment():
    assert revision_sentiment("I agree, that is correct.") == pytest.approx(2 / 3)
    assert revision_sentiment("Wrong: the passage contradicts it.") == pytest.approx(-2 / 3)
    assert revision_sentiment("") == 0.0


def test_a_claim_without_an_opening_is_an_error(transcript):
    rows = [r for r in transcript.to_pylist() if not (r["claim_id"] == "b" and r["member"] == "C" and r["round"] == 0)]
    with pytest.raises(ValueError, match="claim 'b' has no opening answer of \\['C'\\]"):
        debate_features(pa.Table.from_pylist(rows, schema=DEBATE_TURNS))


def test_a_fit_takes_history_from_its_training_claims_only():
    from factrl.consensus.params import AggregatorParams, FitConsensusParams, RewardModelParams
    from factrl.recipes.scmaks import fit_run
    from tests.consensus.synthetic import FLIP, pool

    fs = pool(60, always_right=0)
    for c in range(40, 60):  # member 0 is wrong on every claim outside the training part
        fs.stance[c][0] = FLIP[fs.labels[c]]
    quick = FitConsensusParams(reward_model=RewardModelParams(epochs=2), aggregator=AggregatorParams(
        pretrain_steps=1, iterations=1))
    fit = fit_run(fs, list(range(40)), list(range(40, 50)), quick)
    history = fit.features.x[:, :, FEATURES.index("historical_accuracy")]
    assert (history[:, 0] == 1.0).all()
    assert history[0, 1] == pytest.approx(fs.member_accuracy(range(40))[1])


def test_cross_validation_reports_the_weight_each_member_earns():
    from factrl.consensus.params import (
        AggregatorParams,
        CrossValParams,
        FitConsensusParams,
        RewardModelParams,
    )
    from factrl.recipes.scmaks import cross_validate
    from tests.consensus.synthetic import pool

    quick = FitConsensusParams(reward_model=RewardModelParams(epochs=5), aggregator=AggregatorParams(
        pretrain_steps=50, iterations=5), cv=CrossValParams(folds=2, seeds=(0,)))
    cv = cross_validate(pool(40, always_right=1), quick)
    assert [r["best_member"] for r in cv["per_run"]] == ["m1", "m1"]
    assert cv["weights_mean"]["m1"] > 0.8 and sum(cv["weights_mean"].values()) == pytest.approx(1.0)
