"""A verdict's confidence: the run's raw score, mapped by the checkpoint's calibration when it has one.

The calibration map is fitted by ``evaluate`` on the dev split and stored as
``<calibration_dir>/<checkpoint slug>.json`` (``factrl.eval.calibration.Calibrator``). Without a file
the confidence is the raw score itself, and the result says ``calibrated: false``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)


def raw_confidence(run) -> float | None:
    """The raw score of one HARIS run (a :class:`factrl.agents.haris.HarisResult`): the probability
    its reasoning agent gave the verdict it wrote (``factrl.agents.confidence``); None without a
    verdict."""
    if run.verdict is None or run.raw_confidence is None:
        return None
    return float(run.raw_confidence)


class Calibration:
    """The calibration map of one checkpoint, or none: :meth:`apply` maps raw scores."""

    def __init__(self, calibrator=None, path: Path | None = None) -> None:
        self.calibrator = calibrator
        self.path = path

    @property
    def calibrated(self) -> bool:
        return self.calibrator is not None

    @classmethod
    def load(cls, calibration_dir: str | Path, checkpoint: str) -> Calibration:
        """The map ``evaluate`` saved for the checkpoint of that display name
        (``factrl.eval.calibration.calibration_path``: ``HARIS (trained)`` -> ``haris-trained.json``)."""
        from factrl.eval.calibration import Calibrator, calibration_path

        path = calibration_path(checkpoint, calibration_dir)
        if not path.is_file():
            log.info("serve: no calibration for %s (%s); confidences are raw scores", checkpoint, path)
            return cls()
        return cls(Calibrator.load(path), path)

    def apply(self, raw: Sequence[float | None], groundings: Sequence | None = None) -> list[float | None]:
        """Calibrated scores of ``raw`` (None stays None); the raw scores without a map. ``groundings``
        (one per score, ``factrl.agents.abstain.Grounding``) feed a map that reads the run's evidence
        (``grounded``)."""
        if self.calibrator is None:
            return list(raw)
        known = [i for i, r in enumerate(raw) if r is not None]
        features = [groundings[i] for i in known] if groundings is not None else None
        mapped = self.calibrator.predict([raw[i] for i in known], features=features) if known else []
        out: list[float | None] = [None] * len(raw)
        for i, value in zip(known, mapped):
            out[i] = float(value)
        return out
