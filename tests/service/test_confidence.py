"""The raw score of a run, and the calibration file that maps it."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

from factrl.service.confidence import Calibration, raw_confidence


def _run(verdict, *turns):
    return SimpleNamespace(verdict=verdict, trajectory=SimpleNamespace(turns=list(turns)))


def test_raw_confidence_is_the_share_of_the_final_verdict():
    assert raw_confidence(_run(None, ("model", "x"))) is None
    assert raw_confidence(_run("SUPPORTS", ("model", "<verification>\\boxed{Support}</verification>"))) == 1.0
    assert raw_confidence(_run("SUPPORTS", ("model", "no box at all"))) == 1.0
    mixed = _run("SUPPORTS", ("model", "maybe \\boxed{Refute}? "), ("env", "\\boxed{Refute} in a passage"),
                 ("model", "\\boxed{Support} ... \\boxed{\\text{Supported}}"))
    assert raw_confidence(mixed) == 2 / 3  # the passage's box is not the agent's


def test_calibration_file_is_used_when_present(tmp_path, monkeypatch):
    assert not Calibration.load(tmp_path, "HARIS (trained)").calibrated  # no file: raw scores
    assert Calibration().apply([0.5, None]) == [0.5, None]
    (tmp_path / "HARIS (trained).json").write_text("{}")

    class Calibrator:  # stands in for factrl.eval.calibration.Calibrator
        @classmethod
        def load(cls, path):
            return cls()

        def predict(self, raw):
            return [r * 0.9 for r in raw]

    monkeypatch.setitem(sys.modules, "factrl.eval.calibration", types.SimpleNamespace(Calibrator=Calibrator))
    cal = Calibration.load(tmp_path, "HARIS (trained)")
    assert cal.calibrated and cal.apply([1.0, None, 0.5]) == [0.9, None, 0.45]
