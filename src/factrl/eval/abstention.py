"""Abstention in an evaluation: each HARIS prediction decided (verdict or NOT ENOUGH INFO) and scored
as selective prediction.

:func:`apply_abstention` decides every prediction that carries a grounding (the HARIS checkpoints;
``factrl.agents.abstain.decide`` on its grounding and calibrated confidence): ``outcome`` is the
verdict or NOT ENOUGH INFO, ``abstained`` says which. :func:`abstention_metrics` scores a group of
predictions:

* in-corpus claims (label SUPPORTS / REFUTES): ``coverage`` (share answered, i.e. not abstained),
  ``accuracy_answered`` (accuracy on the answered ones; a run without a verdict is answered and wrong),
  ``accuracy_all`` (the model's own verdicts on all of them, as when it may not abstain);
* out-of-corpus claims (label NOT ENOUGH INFO): ``nei_rate`` (share abstained) and ``n``;
* ``risk_coverage``: the answered in-corpus claims ordered by confidence, most confident first; per
  distinct confidence, answering only at or above it: ``coverage`` (share of the in-corpus claims) and
  ``risk`` (1 - accuracy on those answered).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from factrl.agents.abstain import AbstainParams, Grounding, decide
from factrl.verdicts import NOT_ENOUGH_INFO


def apply_abstention(predictions: Sequence[dict], params: AbstainParams) -> None:
    """Set ``outcome`` and ``abstained`` on every prediction with a ``grounding`` (in place), deciding on
    its calibrated ``confidence`` (its raw one where no map was fitted); others get their verdict."""
    for p in predictions:
        g = p.get("grounding")
        if g is None:
            p["outcome"], p["abstained"] = p["verdict"], None
            continue
        if not isinstance(g, Grounding):
            g = Grounding(**{k: v for k, v in g.items() if k != "answered_share"})
        confidence = p.get("confidence") if p.get("confidence") is not None else p.get("raw_confidence")
        decision = decide(p["verdict"], g, confidence, params)
        p["outcome"], p["abstained"] = decision.verdict, decision.abstained


def risk_coverage(confidence: Sequence[float | None], correct: Sequence[bool], total: int) -> list[dict]:
    """Selective-prediction points over answered claims (``confidence``, ``correct``) out of ``total``
    in-corpus claims: per distinct confidence, high to low, ``{threshold, coverage, risk, answered}``."""
    pairs = sorted(((c if c is not None else 0.0), bool(ok)) for c, ok in zip(confidence, correct))
    pairs.reverse()
    points, right = [], 0
    for i, (c, ok) in enumerate(pairs):
        right += ok
        if i + 1 < len(pairs) and pairs[i + 1][0] == c:
            continue  # claims of equal confidence are answered together
        k = i + 1
        points.append({"threshold": c, "coverage": k / total if total else 0.0, "risk": 1 - right / k,
                       "answered": k})
    return points


def abstention_metrics(predictions: Sequence[Mapping]) -> dict:
    """Coverage, accuracy on the answered claims and on all of them, the out-of-corpus NOT ENOUGH
    INFO rate and the risk-coverage points of ``predictions`` (decided: with ``outcome``)."""
    inside = [p for p in predictions if p["label"] != NOT_ENOUGH_INFO]
    outside = [p for p in predictions if p["label"] == NOT_ENOUGH_INFO]
    answered = [p for p in inside if p["outcome"] != NOT_ENOUGH_INFO]

    def share(hits: int, n: int) -> float | None:
        return hits / n if n else None

    return {
        "in_corpus": {
            "n": len(inside),
            "coverage": share(len(answered), len(inside)),
            "accuracy_answered": share(sum(p["outcome"] == p["label"] for p in answered), len(answered)),
            "accuracy_all": share(sum(p["verdict"] == p["label"] for p in inside), len(inside)),
        },
        "out_of_corpus": {"n": len(outside),
                          "nei_rate": share(sum(p["outcome"] == NOT_ENOUGH_INFO for p in outside), len(outside))},
        "risk_coverage": risk_coverage(
            [p.get("confidence") if p.get("confidence") is not None else p.get("raw_confidence") for p in answered],
            [p["outcome"] == p["label"] for p in answered], len(inside)),
    }


def abstention_rows(predictions: Sequence[Mapping]) -> list[dict]:
    """METRICS rows (``coverage``, ``accuracy_answered``, ``nei_rate``) per (dataset, system, hop) of the
    decided predictions (those with ``abstained`` set), as metrics/eval.json holds every metric."""
    groups: dict[tuple, list] = {}
    for p in predictions:
        if p.get("abstained") is not None:
            groups.setdefault((p["dataset"], p["system"], p.get("num_hops")), []).append(p)
    rows = []
    for (dataset, system, hops), preds in groups.items():
        m = abstention_metrics(preds)
        for section, metric in (("in_corpus", "coverage"), ("in_corpus", "accuracy_answered"),
                                ("out_of_corpus", "nei_rate")):
            value = m[section][metric]
            if value is not None:
                rows.append({"dataset": dataset, "system": system, "num_hops": hops, "n": m[section]["n"],
                             "metric": metric, "value": value, "ci_low": None, "ci_high": None})
    return rows


def abstention_markdown(predictions: Sequence[Mapping], params: AbstainParams) -> str:
    """The report's section: the rules in force, then per (dataset, system) coverage, accuracy on the
    answered claims and on all of them."""
    from factrl.eval.report import markdown_table

    def pct(v):
        return "–" if v is None else f"{100 * v:.1f}"

    groups: dict[tuple[str, str], list] = {}
    for p in predictions:
        if p.get("abstained") is not None:
            groups.setdefault((p["dataset"], p["system"]), []).append(p)
    rules = ", ".join(f"{k}: {v}" for k, v in params.rules().items())
    body = []
    for (dataset, system), preds in groups.items():
        m = abstention_metrics(preds)
        body.append([dataset, system, str(m["in_corpus"]["n"]), pct(m["in_corpus"]["coverage"]),
                     pct(m["in_corpus"]["accuracy_answered"]), pct(m["in_corpus"]["accuracy_all"]),
                     str(m["out_of_corpus"]["n"]), pct(m["out_of_corpus"]["nei_rate"])])
    return "\n".join([f"NOT ENOUGH INFO decided from each run's citations and confidence (params abstain: {rules}). "
                      "Coverage: share of the claims answered; accuracy answered: on those; accuracy all: the "
                      "model's verdicts on every claim, as when it may not abstain (percent).", "",
                      markdown_table(["Dataset", "System", "n", "Coverage", "Accuracy answered", "Accuracy all",
                                      "Out-of-corpus n", "NEI rate"], body)])
