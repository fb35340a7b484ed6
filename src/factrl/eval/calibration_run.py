"""Calibrated confidence in an evaluation: the maps fitted on dev claims, applied and measured.

:func:`fit_calibrators` fits one calibration map (``factrl.eval.calibration``) per system that
reports a raw confidence (the HARIS checkpoints), on dev claims run like an eval set;
:func:`apply_calibration` fills each prediction's calibrated confidence from its map and measures
raw and calibrated confidence per (dataset, system, hop): ECE and Brier rows for
``metrics/eval.json``, reliability diagrams and coverage curves for ``metrics/calibration/``;
:func:`calibration_markdown` is the report's section on them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from factrl.eval.params import EvaluateParams
from factrl.eval.runner import EvalResult, EvalSet, sample_set
from factrl.eval.systems import ModelSystem, System
from factrl.eval.workers import RunFn, run_here

log = logging.getLogger(__name__)


def dev_claims(dev: EvalSet, per_hop: int, seed: int = 0, out_of_corpus=None) -> tuple[list[str], list[str]]:
    """The texts and labels a calibration map is fitted on: ``dev`` sampled as an eval set, then
    every claim of ``out_of_corpus`` (see :func:`fit_calibrators`)."""
    sample = sample_set(dev, per_hop, seed)
    texts, labels = sample.column("claim").to_pylist(), sample.column("label").to_pylist()
    if out_of_corpus is not None:
        texts += out_of_corpus.column("claim").to_pylist()
        labels += out_of_corpus.column("label").to_pylist()
    return texts, labels


def is_calibrated(system: System) -> bool:
    """Whether ``system`` gets a map: a pair system (HARIS), the one that reports a raw confidence."""
    return isinstance(system, ModelSystem) and system.pair


def fit_calibrators(systems: Sequence[System], dev: EvalSet, *, method: str, per_hop: int, seed: int = 0,
                    batch_size: int = EvaluateParams.batch_size, fitted_on: str = "",
                    checkpoints: Mapping[str, Mapping] | None = None, out_of_corpus=None,
                    run: RunFn = run_here) -> tuple[dict, dict]:
    """One calibration map per system that reports a raw confidence (the HARIS checkpoints), fitted
    on ``dev`` (sampled as an eval set: ``per_hop`` claims per hop, balanced labels) with ``method``
    (``factrl.eval.calibration.METHODS``), plus every claim of ``out_of_corpus`` (a CLAIMS table of NOT
    ENOUGH INFO claims, ``factrl.data.out_of_corpus``: a verdict on one is never right, so the map
    learns how often the verifier answers without evidence). Returns ``({system: Calibrator},
    {system: seconds})``; ``checkpoints`` (system -> its models) is stored in each map for readers
    such as the service; ``run`` makes each run (as the runner's)."""
    from factrl.eval.calibration import Calibrator

    texts, labels = dev_claims(dev, per_hop, seed, out_of_corpus)
    if not texts:
        log.warning("calibration: no claims sampled from %s (per_hop %d): no maps fitted", dev.name, per_hop)
    fitted, seconds = {}, {}
    for system in systems:
        if not (is_calibrated(system) and texts):
            continue
        runs, seconds[system.name] = run(system, texts, dev.retriever, batch_size)
        correct = [r.verdict == y for r, y in zip(runs, labels)]
        meta = {"name": system.name, **dict((checkpoints or {}).get(system.name, {}))}
        fitted[system.name] = Calibrator(method, checkpoint=meta).fit(
            [r.raw_confidence for r in runs], correct, fitted_on=fitted_on or dev.name,
            features=[r.grounding for r in runs])
        log.info("calibration of %s: %d dev claims in %.1f s, dev accuracy %.3f", system.name, len(texts),
                 seconds[system.name], fitted[system.name].accuracy)
    return fitted, seconds


def apply_calibration(result: EvalResult, calibrators: Mapping) -> EvalResult:
    """Fill each prediction's calibrated ``confidence`` from its system's map, and measure the raw
    and calibrated confidences per (dataset, system, hop) and pooled (hop ``all``): METRICS rows
    ``ece_raw``, ``ece_calibrated``, ``brier_raw``, ``brier_calibrated`` per hop (into
    ``result.rows``, so metrics/eval.json), and everything, pooled included, with the reliability
    diagrams and coverage curves in ``result.calibration``. Systems without raw
    confidences (the baselines) are left out."""
    from factrl.eval.calibration import calibration_metrics

    groups: dict[tuple[str, str], list[dict]] = {}
    for p in result.predictions:
        if p.get("raw_confidence") is not None:
            groups.setdefault((p["dataset"], p["system"]), []).append(p)
    for (dataset, system), preds in groups.items():
        cal = calibrators.get(system)
        if cal is not None:
            calibrated = cal.predict([p["raw_confidence"] for p in preds], features=[p.get("grounding") for p in preds])
            for p, c in zip(preds, calibrated):
                p["confidence"] = c
        by_hop = {"all": preds} | {f"{h}hop": [p for p in preds if p["num_hops"] == h]
                                   for h in sorted({p["num_hops"] for p in preds} - {None})}
        for hop, sel in by_hop.items():
            correct = [p["verdict"] == p["label"] for p in sel]
            m = calibration_metrics([p["raw_confidence"] for p in sel],
                                    [p["confidence"] for p in sel] if cal is not None else None, correct)
            result.calibration.setdefault(dataset, {}).setdefault(system, {})[hop] = m
            if hop == "all" and len(by_hop) > 1:
                continue  # eval.json is per hop ("all" is a set without hop counts); pooled: calibration.json
            num_hops = None if hop == "all" else int(hop.removesuffix("hop"))
            for metric in ("ece_raw", "ece_calibrated", "brier_raw", "brier_calibrated"):
                if metric in m:
                    result.rows.append({"dataset": dataset, "system": system, "num_hops": num_hops, "n": m["n"],
                                        "metric": metric, "value": m[metric], "ci_low": None, "ci_high": None})
    return result


def calibration_markdown(calibration: Mapping, maps: Mapping | None = None) -> str:
    """The report's calibration section: ECE / Brier per system and hop, then per system the pooled
    reliability diagram (raw and calibrated bins) and the coverage-accuracy curve."""
    from factrl.eval.calibration import ECE_BINS
    from factrl.tables import markdown_table

    def num(v):
        return "–" if v is None else f"{v:.3f}"

    parts = [f"ECE over {ECE_BINS} equal-width confidence bins and Brier score of each HARIS checkpoint's raw "
             "confidence (the verdict token's probability) and of its calibrated confidence (the map fitted on "
             "dev claims, never on these)."]
    for name, cal in (maps or {}).items():
        parts.append(f"- {name}: {cal.method} map fitted on {cal.n} runs of {cal.fitted_on} "
                     f"(dev accuracy {num(cal.accuracy)})")
    body = [[dataset, system, hop, str(m["n"]), num(m["ece_raw"]), num(m.get("ece_calibrated")),
             num(m["brier_raw"]), num(m.get("brier_calibrated"))]
            for dataset, by_system in calibration.items() for system, by_hop in by_system.items()
            for hop, m in by_hop.items()]
    parts += ["", markdown_table(["Dataset", "System", "Hops", "n", "ECE raw", "ECE calibrated", "Brier raw",
                                  "Brier calibrated"], body)]
    for dataset, by_system in calibration.items():
        for system, by_hop in by_system.items():
            m = by_hop["all"]
            rows = []
            for kind in ("raw", "calibrated"):
                for b in m.get(f"reliability_{kind}", []):
                    rows.append([kind, f"{b['low']:.1f}-{b['high']:.1f}", num(b["confidence"]), num(b["accuracy"]),
                                 str(b["count"])])
            parts += ["", f"### {dataset}, {system}: reliability diagram (all hops)", "",
                      markdown_table(["Confidence", "Bin", "Mean confidence", "Accuracy", "Claims"], rows)]
            which = "calibrated" if "ece_calibrated" in m else "raw"
            curve = [[f"{c['threshold']:.2f}", f"{100 * c['coverage']:.1f}", "–" if c["accuracy"] is None
                      else f"{100 * c['accuracy']:.1f}", str(c["answered"])] for c in m["coverage"]]
            parts += ["", f"Coverage-accuracy: answer only at {which} confidence >= threshold, else "
                      "\"not enough evidence\" (percent).", "",
                      markdown_table(["Threshold", "Coverage", "Accuracy answered", "Answered"], curve)]
    return "\n".join(parts)
