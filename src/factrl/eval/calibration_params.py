"""``evaluate.calibration``'s parameters, apart from the code that fits the maps.

``factrl.config`` (imported by every stage) names this dataclass in ``EvaluateParams``; keeping it
out of :mod:`factrl.eval.calibration` keeps that module out of every stage's import closure, so an
edit to the fitting code reruns ``evaluate`` alone (``factrl.devtools.deps``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class CalibrationParams:
    """``evaluate.calibration``: the calibration map fitted per HARIS checkpoint during ``evaluate``
    (``factrl.eval.calibration``), saved to ``metrics/calibration/<checkpoint-slug>.json``.

    method: ``isotonic`` or ``temperature`` (names of ``factrl.eval.calibration.METHODS``), or
        ``none`` to skip it (no dev claims evaluated, no maps written, no calibration metrics).
    dev_set: the claim file the maps are fitted on; never the eval claims: the demo world's dev
        split, which no stage trains on.
    dev_per_hop: dev claims per hop setting, balanced labels (0 = the whole file); every HARIS
        checkpoint runs on them once, on top of the evaluation itself.
    """

    method: Literal["isotonic", "temperature", "none"] = "temperature"
    dev_set: str = "data/claims/dev.parquet"
    dev_per_hop: int = 10

    @property
    def enabled(self) -> bool:
        return self.method != "none"
