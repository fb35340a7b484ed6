"""A verdict's confidence: the run's raw score, mapped by the checkpoint's calibration when it has one.

The calibration map is fitted by ``evaluate`` on the dev split and stored as
``<calibration_dir>/<checkpoint name>.json`` (``factrl.eval.calibration.Calibrator``). Without a file
the confidence is the raw score itself, and the result says ``calibrated: false``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

from factrl.agents.protocol import boxed_verdict

log = logging.getLogger(__name__)

_BOXED = re.compile(r"\\boxed\s*\{(?:[^{}]|\{[^{}]*\})*\}")


def raw_confidence(run) -> float | None:
    """The raw score of one HARIS run (a :class:`factrl.agents.haris.HarisResult`): the share of the
    final verdict among the verdicts the reasoning agent wrote (``\\boxed{...}`` in its own turns),
    1.0 when it wrote only the final one; None without a verdict.

    replaced by the run result's ``raw_confidence`` when factrl.eval.calibration is merged"""
    verdict = run.verdict
    if verdict is None:
        return None
    raw = getattr(run, "raw_confidence", None)
    if raw is not None:
        return float(raw)
    written = "".join(text for role, text in run.trajectory.turns if role == "model")
    mentions = [v for v in (boxed_verdict(m.group(0)) for m in _BOXED.finditer(written)) if v is not None]
    if not mentions:
        return 1.0
    return mentions.count(verdict) / len(mentions)


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
        """``<calibration_dir>/<checkpoint>.json`` when it exists and the calibration code is there."""
        path = Path(calibration_dir) / f"{checkpoint}.json"
        if not path.is_file():
            log.info("serve: no calibration for %s (%s); confidences are raw scores", checkpoint, path)
            return cls()
        try:
            from factrl.eval.calibration import Calibrator
        except ImportError:  # until factrl.eval.calibration is merged
            log.warning("serve: %s exists but factrl.eval.calibration is missing; confidences are raw", path)
            return cls()
        return cls(Calibrator.load(path), path)

    def apply(self, raw: Sequence[float | None]) -> list[float | None]:
        """Calibrated scores of ``raw`` (None stays None); the raw scores without a map."""
        if self.calibrator is None:
            return list(raw)
        known = [i for i, r in enumerate(raw) if r is not None]
        mapped = self.calibrator.predict([raw[i] for i in known]) if known else []
        out: list[float | None] = [None] * len(raw)
        for i, value in zip(known, mapped):
            out[i] = float(value)
        return out
