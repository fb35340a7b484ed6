"""The raw score of a run, and the calibration file that maps it."""

from __future__ import annotations

from types import SimpleNamespace

from factrl.service.confidence import Calibration, raw_confidence


def test_raw_confidence_is_the_runs_own_verdict_probability():
    assert raw_confidence(SimpleNamespace(verdict=None, raw_confidence=None)) is None
    assert raw_confidence(SimpleNamespace(verdict="SUPPORTS", raw_confidence=0.8)) == 0.8


def test_the_map_evaluate_saved_is_used_when_present(tmp_path):
    from factrl.eval.calibration import Calibrator, calibration_path

    assert not Calibration.load(tmp_path, "HARIS (trained)").calibrated  # no file: raw scores
    assert Calibration().apply([0.5, None]) == [0.5, None]
    # evaluate's map for the checkpoint of that name: over-confident raw scores, right 60% of the time
    raw, right = [0.99] * 10, [1] * 6 + [0] * 4
    Calibrator("temperature").fit(raw, right, fitted_on="dev").save(calibration_path("HARIS (trained)", tmp_path))
    cal = Calibration.load(tmp_path, "HARIS (trained)")
    mapped = cal.apply([0.99, None])
    assert cal.calibrated and mapped[1] is None and abs(mapped[0] - 0.6) < 0.05


def test_a_grounded_map_reads_each_runs_evidence(tmp_path):
    from factrl.eval.calibration import Calibrator, calibration_path

    cited = {"entity_share": 1.0, "content_share": 1.0, "subject_cited": True, "questions": 2, "answered": 2}
    nothing = {"entity_share": 0.0, "content_share": 0.0, "subject_cited": False, "questions": 2, "answered": 0}
    # dev runs at the same raw score: right 70% of the time with evidence, never without
    raw, right = [0.95] * 20, [1] * 7 + [0] * 3 + [0] * 10
    Calibrator("grounded").fit(raw, right, features=[cited] * 10 + [nothing] * 10).save(
        calibration_path("HARIS (trained)", tmp_path))
    cal = Calibration.load(tmp_path, "HARIS (trained)")
    with_evidence, without, none = cal.apply([0.95, 0.95, None], [cited, nothing, None])
    assert without < 0.2 < 0.5 < with_evidence and none is None
