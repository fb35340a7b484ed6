"""Calibration maps (temperature, isotonic) and their metrics (ECE, Brier, reliability, coverage)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from factrl.eval.calibration import (
    ECE_BINS,
    METHODS,
    Calibrator,
    brier,
    calibration_metrics,
    calibration_path,
    checkpoint_slug,
    coverage_curve,
    ece,
    reliability,
)


def _overconfident(n: int, seed: int):
    """A verifier that says 0.9-0.99 but is right with probability 0.5 + (raw - 0.9) * 4 (0.5-0.86)."""
    rng = np.random.default_rng(seed)
    raw = rng.uniform(0.9, 0.99, n)
    correct = rng.uniform(size=n) < 0.5 + (raw - 0.9) * 4
    return raw.tolist(), correct.tolist()


def test_ece_and_brier_by_hand():
    conf = [0.05, 0.15, 0.95, 0.95]
    right = [0, 0, 1, 0]
    # bins: [0,.1): conf .05 acc 0; [.1,.2): .15 acc 0; [.9,1]: .95 acc .5
    assert ece(conf, right) == pytest.approx(0.25 * 0.05 + 0.25 * 0.15 + 0.5 * 0.45)
    assert brier(conf, right) == pytest.approx((0.05**2 + 0.15**2 + 0.05**2 + 0.95**2) / 4)
    rows = reliability(conf, right)
    assert [(r["low"], r["count"]) for r in rows] == [(0.0, 1), (0.1, 1), (0.9, 2)]
    assert reliability([1.0], [1])[0]["low"] == pytest.approx(1 - 1 / ECE_BINS)  # 1.0 is in the last bin


def test_coverage_curve_abstains_below_the_threshold():
    curve = coverage_curve([0.55, 0.7, 0.9], [0, 1, 1], thresholds=(0.5, 0.6, 0.95))
    assert curve[0] == {"threshold": 0.5, "coverage": 1.0, "accuracy": pytest.approx(2 / 3), "answered": 3}
    assert curve[1]["coverage"] == pytest.approx(2 / 3) and curve[1]["accuracy"] == 1.0
    assert curve[2] == {"threshold": 0.95, "coverage": 0.0, "accuracy": None, "answered": 0}


@pytest.mark.parametrize("method", ["temperature", "isotonic"])
def test_each_method_lowers_the_ece_of_an_overconfident_verifier_on_fresh_claims(method):
    raw, right = _overconfident(400, seed=0)
    cal = Calibrator(method).fit(raw, right, fitted_on="dev")
    test_raw, test_right = _overconfident(400, seed=1)
    after = cal.predict(test_raw)
    assert all(0.0 <= p <= 1.0 for p in after)
    assert ece(after, test_right) < 0.5 * ece(test_raw, test_right)
    assert brier(after, test_right) < brier(test_raw, test_right)
    assert cal.n == 400 and cal.fitted_on == "dev" and cal.accuracy == pytest.approx(np.mean(right))


def test_temperature_flattens_an_overconfident_score_and_keeps_the_ranking():
    raw, right = _overconfident(400, seed=0)
    cal = Calibrator("temperature").fit(raw, right)
    assert cal.parameters["temperature"] > 1.0
    out = cal.predict([0.9, 0.95, 0.99])
    assert out[0] < out[1] < out[2] < 0.99


def test_isotonic_is_monotone_and_matches_scikit_learn():
    from sklearn.isotonic import IsotonicRegression

    raw, right = _overconfident(300, seed=2)
    cal = Calibrator("isotonic").fit(raw, right)
    grid = np.linspace(0, 1, 101)
    got = cal.predict(grid)
    assert np.all(np.diff(got) >= -1e-12)
    ref = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(raw, right).predict(grid)
    assert np.allclose(got, ref)


def _grounding(share: float, questions: int = 2, answered: int = 2) -> dict:
    """A run's grounding as ``Grounding.to_dict()`` gives it: ``share`` of the claim's entities cited."""
    return {"entity_share": share, "content_share": share, "subject_cited": share > 0,
            "questions": questions, "answered": answered}


def _mix(n: int, seed: int):
    """A dev or test mix: half in-corpus runs (evidence cited, right 70% of the time) and half
    out-of-corpus runs (nothing about the claim cited, never right), every run at a raw 0.9-0.99."""
    rng = np.random.default_rng(seed)
    raw = rng.uniform(0.9, 0.99, n).tolist()
    inside = np.arange(n) < n // 2
    correct = (inside & (rng.uniform(size=n) < 0.7)).tolist()
    groundings = [_grounding(1.0) if i else _grounding(0.0, answered=0) for i in inside]
    return raw, correct, groundings


def test_the_grounded_map_lowers_confidence_where_evidence_is_missing():
    raw, right, ground = _mix(1000, seed=0)
    test_raw, test_right, test_ground = _mix(1000, seed=1)
    grounded = Calibrator("grounded").fit(raw, right, features=ground)
    conf = grounded.predict(test_raw, features=test_ground)
    assert ece(conf, test_right) < 0.05
    assert max(conf[500:]) < 0.1 < 0.6 < min(conf[:500])  # out of corpus: low; in corpus: near 0.7
    # a raw score alone cannot tell them apart: a temperature map stays far off on the same mix
    temperature = Calibrator("temperature").fit(raw, right).predict(test_raw)
    assert ece(temperature, test_right) > 0.1  # every run near 0.5, the mix right 35% of the time
    assert Calibrator("temperature").needs_grounding is False and grounded.needs_grounding
    with pytest.raises(ValueError, match="reads each run's grounding"):
        grounded.predict(test_raw)
    with pytest.raises(ValueError, match="reads each run's grounding"):
        Calibrator("grounded").fit(raw, right)
    with pytest.raises(ValueError, match="1000 raw scores but 999 groundings"):
        grounded.predict(test_raw, features=test_ground[1:])
    # one class on the dev runs (every run wrong): the map is that rate
    assert Calibrator("grounded").fit(raw, [False] * 1000, features=ground).predict([0.95], [_grounding(1.0)])[0] < 0.01


def test_save_and_load_round_trip(tmp_path):
    raw, right = _overconfident(100, seed=3)
    ground = [_grounding(v) for v in np.linspace(0, 1, 100)]
    for method in METHODS:
        cal = Calibrator(method, checkpoint={"name": "HARIS (trained)"}).fit(raw, right, fitted_on="demo dev",
                                                                            features=ground)
        path = cal.save(tmp_path / f"{method}.json")
        back = Calibrator.load(path)
        probe = [_grounding(0.0), _grounding(0.5), _grounding(1.0)]
        assert back.predict([0.2, 0.93, 0.97], probe) == cal.predict([0.2, 0.93, 0.97], probe)
        data = json.loads(path.read_text())
        assert {k: data[k] for k in ("method", "n", "fitted_on")} == {"method": method, "n": 100,
                                                                     "fitted_on": "demo dev"}
        assert data["checkpoint"] == {"name": "HARIS (trained)"}


def test_bad_inputs_and_files_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="calibration method"):
        Calibrator("platt")
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        Calibrator("isotonic").fit([1.5], [1])
    with pytest.raises(ValueError, match="2 raw scores but 1"):
        Calibrator("isotonic").fit([0.5, 0.6], [1])
    with pytest.raises(RuntimeError, match="not fitted"):
        Calibrator("temperature").predict([0.5])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "factrl-calibration/1", "method": "isotonic", "parameters": [], "n": 3}))
    with pytest.raises(ValueError, match=r"bad.json: field 'parameters'"):
        Calibrator.load(bad)
    with pytest.raises(FileNotFoundError, match="no calibration map"):
        Calibrator.load(tmp_path / "missing.json")


def test_paths_and_metrics_bundle():
    assert checkpoint_slug("HARIS (trained)") == "haris-trained"
    assert calibration_path("HARIS (base)").as_posix() == "metrics/calibration/haris-base.json"
    m = calibration_metrics([0.9, 0.8], [0.6, 0.5], [1, 0])
    assert set(m) >= {"ece_raw", "ece_calibrated", "brier_raw", "brier_calibrated", "reliability_raw",
                      "reliability_calibrated", "coverage", "n"}
    assert m["coverage"][0]["threshold"] == 0.5
