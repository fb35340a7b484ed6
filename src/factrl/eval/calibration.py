"""Calibrated confidence: a fitted map from a verifier's raw score to P(verdict is right), and its metrics.

A HARIS run's raw confidence (``ClaimRun.raw_confidence``: the verdict token's probability,
``factrl.agents.confidence``) is a score, not a probability one can trust: a 135M model writes its
verdicts at 0.99 while being right about half the time. :class:`Calibrator` learns a monotone map
from raw scores to the observed accuracy on claims it was not evaluated on (stage ``evaluate`` fits
one per HARIS checkpoint on a sample of ``data/claims/dev.parquet`` and saves it to
``metrics/calibration/<checkpoint-slug>.json``; the service loads it with :meth:`Calibrator.load`).

Methods, by name (:data:`METHODS`):

* ``temperature``: ``sigmoid(logit(raw) / T)``, ``T`` fitted by minimising the negative
  log-likelihood (scipy, bounded scalar search). One parameter: safe on a few dozen claims, but it
  keeps the score's ranking *and* its centre at 0.5, so it cannot fix a score that is biased
  (a verifier right 60 % of the time at every raw score).
* ``isotonic``: scikit-learn's ``IsotonicRegression`` (non-decreasing, clipped to [0, 1], constant
  outside the fitted range): fixes bias and shape, needs more claims.
* ``grounded``: a logistic regression (scikit-learn) on the raw score's logit *and* the run's evidence
  (:func:`grounding_features`: how much of the claim the citations mention, whether they name its
  subject, how many questions retrieved text answered). A raw score alone cannot tell a verdict backed
  by passages about the claim from the same verdict written over passages about something else (a
  135M model is as sure of both); fitted on a dev mix that holds out-of-corpus claims, this map's
  confidence falls where the evidence is missing (issue 49). It needs each run's grounding at fit and
  predict time (``features=``).

Metrics (all on ``confidence`` in [0, 1] and ``correct`` in {0, 1}):

* :func:`ece`: expected calibration error over :data:`ECE_BINS` (10) equal-width bins of confidence:
  ``sum_b n_b / n * |accuracy_b - mean confidence_b|``;
* :func:`brier`: mean squared error of the confidence against correctness;
* :func:`reliability`: the diagram's bins (mean confidence, accuracy, count), ECE's bins;
* :func:`coverage_curve`: abstain ("not enough evidence") below a threshold: per threshold, the
  share of claims answered (coverage) and the accuracy on them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from factrl.registry import Registry

__all__ = ["Calibrator", "METHODS", "brier", "calibration_metrics", "calibration_path",
           "checkpoint_slug", "coverage_curve", "ece", "reliability"]

ECE_BINS = 10  # equal-width bins of [0, 1] for ECE and the reliability diagram
COVERAGE_THRESHOLDS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))  # 0.50 .. 0.95
EPS = 1e-6  # raw scores are clipped to [EPS, 1 - EPS] before a logit
CALIBRATION_DIR = Path("metrics/calibration")
FORMAT = "factrl-calibration/1"


# --------------------------------------------------------------------------------------------
# methods
# --------------------------------------------------------------------------------------------


def _as_arrays(raw_scores: Sequence[float], correct: Sequence[bool | int] | None = None):
    raw = np.asarray(list(raw_scores), dtype=float)
    if raw.ndim != 1 or np.any(~np.isfinite(raw)) or np.any((raw < 0) | (raw > 1)):
        raise ValueError("raw scores must be finite numbers in [0, 1]")
    if correct is None:
        return raw
    y = np.asarray([float(c) for c in correct], dtype=float)
    if y.shape != raw.shape:
        raise ValueError(f"{len(raw)} raw scores but {len(y)} correctness labels")
    if np.any((y != 0) & (y != 1)):
        raise ValueError("correctness labels must be 0/1 or booleans")
    return raw, y


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


@dataclass(frozen=True)
class Method:
    """A calibration method: ``fit(raw [n], correct [n], features [n, f] | None) -> parameters``
    (JSON-able) and ``apply(parameters, raw [n], features [n, f] | None) -> calibrated [n]``, on numpy
    arrays; ``needs_features``: it reads each run's :func:`grounding_features`."""

    fit: Callable[[np.ndarray, np.ndarray, np.ndarray | None], dict]
    apply: Callable[[dict, np.ndarray, np.ndarray | None], np.ndarray]
    needs_features: bool = False


METHODS: Registry[Method] = Registry("calibration method")


def _fit_temperature(raw: np.ndarray, y: np.ndarray, _features=None) -> dict:
    from scipy.optimize import minimize_scalar

    z = _logit(raw)

    def nll(log_t: float) -> float:
        q = np.clip(1.0 / (1.0 + np.exp(-z / math.exp(log_t))), EPS, 1 - EPS)
        return float(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)))

    # T in [e^-4, e^6]: from sharpening 55x to flattening a 0.99999 score to ~0.5
    best = minimize_scalar(nll, bounds=(-4.0, 6.0), method="bounded")
    return {"temperature": float(math.exp(best.x))}


def _apply_temperature(params: dict, raw: np.ndarray, _features=None) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-_logit(raw) / params["temperature"]))


def _fit_isotonic(raw: np.ndarray, y: np.ndarray, _features=None) -> dict:
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(raw, y)
    # the fitted step function's knots: np.interp between them is exactly iso.predict
    return {"x": [float(v) for v in iso.X_thresholds_], "y": [float(v) for v in iso.y_thresholds_]}


def _apply_isotonic(params: dict, raw: np.ndarray, _features=None) -> np.ndarray:
    return np.interp(raw, np.asarray(params["x"]), np.asarray(params["y"]))


# What a ``grounded`` map reads of a run beside its raw score, each in [0, 1] (``grounding_features``).
GROUNDING_FEATURES = ("evidence_share", "subject_cited", "answered_share", "read_share")


def grounding_features(g: Any) -> list[float]:
    """``[len(GROUNDING_FEATURES)]`` numbers of one run's grounding (a ``factrl.agents.abstain.Grounding``
    or its ``to_dict()``): ``evidence_share`` (the share of the claim's named entities the citations
    mention; for a claim naming none, the share of its content words the best citation holds),
    ``subject_cited`` (1 when a citation names the claim's subject; for a claim naming none, its
    evidence share), ``answered_share`` (questions answered from retrieved text) and ``read_share`` (the
    share of the claim's entities the passages read mention, cited or not; its evidence share where
    that was not recorded)."""
    d = g if isinstance(g, dict) else g.to_dict()
    share = d["entity_share"] if d.get("entity_share") is not None else d["content_share"]
    subject = float(d["subject_cited"]) if d.get("subject_cited") is not None else share
    answered = d["answered"] / d["questions"] if d.get("questions") else 0.0
    read = d["read_entity_share"] if d.get("read_entity_share") is not None else share
    return [float(share), subject, float(answered), float(read)]


def _design(raw: np.ndarray, features: np.ndarray | None) -> np.ndarray:
    """``[n, 1 + f]``: the raw score's logit (scaled to about [-1, 1] for a 0.99999 score) and the features
    (``Calibrator`` passes them to a method that ``needs_features``)."""
    assert features is not None, "a grounded map reads each run's features"
    return np.column_stack([_logit(raw) / 10.0, features])


def _fit_grounded(raw: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> dict:
    from sklearn.linear_model import LogisticRegression

    if len(np.unique(y)) < 2:  # one class: the map is its rate, whatever the inputs
        return {"features": list(GROUNDING_FEATURES), "coef": [0.0] * (1 + len(GROUNDING_FEATURES)),
                "intercept": float(_logit(np.array([y.mean()]))[0])}
    # weak L2 (C=10): out-of-corpus runs are nearly separable by their evidence, and a strong penalty
    # would pull the in-corpus confidence towards the mix's mean (0.59 instead of 0.70 on a test mix)
    model = LogisticRegression(C=10.0).fit(_design(raw, features), y)
    return {"features": list(GROUNDING_FEATURES), "coef": [float(v) for v in model.coef_[0]],
            "intercept": float(model.intercept_[0])}


def _apply_grounded(params: dict, raw: np.ndarray, features: np.ndarray | None) -> np.ndarray:
    z = _design(raw, features) @ np.asarray(params["coef"]) + params["intercept"]
    return 1.0 / (1.0 + np.exp(-z))


METHODS.add("temperature", Method(_fit_temperature, _apply_temperature))
METHODS.add("isotonic", Method(_fit_isotonic, _apply_isotonic))
METHODS.add("grounded", Method(_fit_grounded, _apply_grounded, needs_features=True))


@dataclass
class Calibrator:
    """A fitted map from raw confidence to calibrated confidence (see the module docstring).

    ``Calibrator("isotonic").fit(raw, correct)`` fits in place and returns itself;
    :meth:`predict` maps new raw scores; :meth:`save` / :meth:`load` keep it as JSON:
    ``{"format", "method", "parameters", "n", "fitted_on", "accuracy", "checkpoint"}``.
    """

    method: str
    parameters: dict | None = None
    n: int = 0
    fitted_on: str = ""
    accuracy: float | None = None  # of the runs it was fitted on
    checkpoint: dict = field(default_factory=dict)  # what it calibrates (name, models), for readers

    def __post_init__(self) -> None:
        METHODS.lookup(self.method)  # an unknown name fails here, listing the known ones

    @property
    def needs_grounding(self) -> bool:
        """Whether :meth:`fit` and :meth:`predict` need each run's grounding (``features=``)."""
        return METHODS.lookup(self.method).needs_features

    def _features(self, groundings: Sequence[Any] | None, n: int) -> np.ndarray | None:
        if not self.needs_grounding:
            return None
        if groundings is None:
            raise ValueError(f"the {self.method} calibration map reads each run's grounding: pass features=")
        if len(groundings) != n:
            raise ValueError(f"{n} raw scores but {len(groundings)} groundings")
        return np.asarray([grounding_features(g) for g in groundings], dtype=float).reshape(n, len(GROUNDING_FEATURES))

    def fit(self, raw_scores: Sequence[float], correct: Sequence[bool | int], fitted_on: str = "",
            features: Sequence[Any] | None = None) -> Calibrator:
        """Fit on ``raw_scores`` ``[n]`` and whether each verdict was right ``[n]`` (and, for a method
        that reads them, each run's grounding ``features`` ``[n]``); returns self."""
        raw, y = _as_arrays(raw_scores, correct)
        if len(raw) == 0:
            raise ValueError("cannot fit a calibration map on no runs")
        self.parameters = METHODS.lookup(self.method).fit(raw, y, self._features(features, len(raw)))
        self.n, self.fitted_on, self.accuracy = len(raw), fitted_on, float(y.mean())
        return self

    def predict(self, raw_scores: Sequence[float], features: Sequence[Any] | None = None) -> list[float]:
        """Calibrated confidences ``[n]`` in [0, 1] of ``raw_scores`` ``[n]`` (with each run's grounding
        ``features`` ``[n]`` for a method that reads them; ignored by the others)."""
        if self.parameters is None:
            raise RuntimeError(f"{self.method} calibrator is not fitted: call fit() or load() first")
        raw = _as_arrays(raw_scores)
        if len(raw) == 0:
            return []
        out = METHODS.lookup(self.method).apply(self.parameters, raw, self._features(features, len(raw)))
        return [float(v) for v in np.clip(out, 0.0, 1.0)]

    def to_dict(self) -> dict:
        return {"format": FORMAT, "method": self.method, "parameters": self.parameters, "n": self.n,
                "fitted_on": self.fitted_on, "accuracy": self.accuracy, "checkpoint": dict(self.checkpoint)}

    def save(self, path: str | Path) -> Path:
        """Write the fitted map as JSON (atomically)."""
        from factrl.io import write_json

        if self.parameters is None:
            raise RuntimeError("refusing to save an unfitted calibrator")
        write_json(self.to_dict(), Path(path))
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> Calibrator:
        """A calibrator saved by :meth:`save`; errors name the file and the field."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no calibration map (run the evaluate stage with "
                                    "evaluate.calibration.method set)") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON: {err}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path}: field 'format': expected {FORMAT!r}, got {data.get('format')!r}"
                             if isinstance(data, dict) else f"{path}: expected a JSON object")
        for key, kind in (("method", str), ("parameters", dict), ("n", int)):
            if not isinstance(data.get(key), kind):
                raise ValueError(f"{path}: field {key!r}: expected {kind.__name__}, got {data.get(key)!r}")
        if data["method"] not in METHODS:
            raise ValueError(f"{path}: field 'method': unknown {data['method']!r}; known: {sorted(METHODS)}")
        return cls(data["method"], data["parameters"], data["n"], data.get("fitted_on", ""),
                   data.get("accuracy"), data.get("checkpoint") or {})


def checkpoint_slug(name: str) -> str:
    """A file name for a checkpoint's display name: ``HARIS (trained)`` -> ``haris-trained``."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise ValueError(f"checkpoint name {name!r} has no letters or digits to name a file by")
    return slug


def calibration_path(checkpoint_name: str, root: str | Path = CALIBRATION_DIR) -> Path:
    """Where ``evaluate`` saves the map of the checkpoint named ``checkpoint_name``."""
    return Path(root) / f"{checkpoint_slug(checkpoint_name)}.json"


# --------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------


def reliability(confidence: Sequence[float], correct: Sequence[bool | int], bins: int = ECE_BINS) -> list[dict]:
    """The reliability diagram: one dict per non-empty equal-width bin of [0, 1]: ``low``, ``high``,
    ``confidence`` (mean), ``accuracy``, ``count``. A confidence of exactly 1 falls in the last bin."""
    conf, y = _as_arrays(confidence, correct)
    which = np.minimum((conf * bins).astype(int), bins - 1)
    out = []
    for b in range(bins):
        sel = which == b
        if sel.any():
            out.append({"low": b / bins, "high": (b + 1) / bins, "confidence": float(conf[sel].mean()),
                        "accuracy": float(y[sel].mean()), "count": int(sel.sum())})
    return out


def ece(confidence: Sequence[float], correct: Sequence[bool | int], bins: int = ECE_BINS) -> float:
    """Expected calibration error over ``bins`` equal-width bins (0 for no runs)."""
    rows = reliability(confidence, correct, bins)
    n = sum(r["count"] for r in rows)
    return float(sum(r["count"] / n * abs(r["accuracy"] - r["confidence"]) for r in rows)) if n else 0.0


def brier(confidence: Sequence[float], correct: Sequence[bool | int]) -> float:
    """Mean squared difference between confidence and correctness (0 for no runs)."""
    conf, y = _as_arrays(confidence, correct)
    return float(np.mean((conf - y) ** 2)) if len(conf) else 0.0


def coverage_curve(confidence: Sequence[float], correct: Sequence[bool | int],
                   thresholds: Sequence[float] = COVERAGE_THRESHOLDS) -> list[dict]:
    """Answer only when ``confidence >= threshold`` (else "not enough evidence"): per threshold, the
    ``coverage`` (share answered), the ``accuracy`` on the answered claims (None when none is) and
    ``answered`` (how many)."""
    conf, y = _as_arrays(confidence, correct)
    out = []
    for t in thresholds:
        sel = conf >= t
        k = int(sel.sum())
        out.append({"threshold": float(t), "coverage": float(k / len(conf)) if len(conf) else 0.0,
                    "accuracy": float(y[sel].mean()) if k else None, "answered": k})
    return out


def calibration_metrics(raw: Sequence[float], calibrated: Sequence[float] | None,
                        correct: Sequence[bool | int]) -> dict[str, Any]:
    """ECE and Brier of the raw scores and (where given) of the calibrated ones, with their
    reliability diagrams and the coverage-accuracy curve of the calibrated (else raw) confidence."""
    out: dict[str, Any] = {"n": len(list(correct)), "ece_raw": ece(raw, correct), "brier_raw": brier(raw, correct),
                           "reliability_raw": reliability(raw, correct)}
    if calibrated is not None:
        out |= {"ece_calibrated": ece(calibrated, correct), "brier_calibrated": brier(calibrated, correct),
                "reliability_calibrated": reliability(calibrated, correct)}
    out["coverage"] = coverage_curve(calibrated if calibrated is not None else raw, correct)
    return out
