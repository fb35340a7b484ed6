"""The evaluation runner: every system on every eval set, per hop, with bootstrap intervals.

Given claim tables per eval set (each with the retriever its systems search), and systems by name
(HARIS at a reasoning / search checkpoint pair, the single agent, RAG, Decompose-Then-Verify), the
runner samples each set per hop with balanced labels, runs each system over the sample in batches,
and scores the verdicts per (dataset, hop, system): accuracy, weighted precision / recall / F1 and
macro F1 (``factrl.eval.metrics``), each with a seeded bootstrap 95% interval, plus the average
number of questions and searches per claim and the share of claims left without a verdict. The
task is binary (SUPPORTS / REFUTES): other labels are dropped before sampling. CHECKWHY has only
positive claims, so its score is accuracy on them.

Rows follow ``factrl.data.schemas.METRICS``; :func:`factrl.eval.report.nested_metrics` turns them into the
dataset -> hop -> system -> metric mapping of ``metrics/eval.json``. The trajectories of the first
``trace_claims`` claims of each (dataset, system) are kept for the trace page, with reward = 1 for a
correct verdict and 0 otherwise.

``factrl evaluate --claims CLAIMS.jsonl --passages PASSAGES.jsonl --out DIR`` (:func:`main`) runs the
same evaluation on any claim file, indexing the given passages first.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from factrl.agents.rollout import Trajectory
from factrl.eval.metrics import METRICS, bootstrap_ci, bootstrap_mean_ci, classification_metrics
from factrl.eval.params import EvaluateParams
from factrl.eval.report import nested_metrics
from factrl.eval.sampling import stratified_sample
from factrl.llm.backends import add_endpoint_args, parse_spec, routed
from factrl.registry import Registry

log = logging.getLogger(__name__)

BINARY_LABELS = ("SUPPORTS", "REFUTES")
COUNT_METRICS = ("avg_questions", "avg_searches", "no_verdict_rate")


# --------------------------------------------------------------------------------------------
# systems
# --------------------------------------------------------------------------------------------


@dataclass
class ClaimRun:
    """One system's work on one claim.

    verdict: "SUPPORTS" | "REFUTES" | None (no verdict: a malformed or unfinished response).
    questions: questions asked to a search agent (HARIS) or sub-claims checked (Decompose-Then-Verify).
    searches: retriever calls made for the claim, over all agents.
    trajectories: (agent, trajectory, format_valid) of every rollout behind the verdict.
    raw_confidence: the system's own probability that ``verdict`` is right, in [0, 1] (HARIS: the
        verdict token's, ``factrl.agents.confidence``; 0.0 without a verdict); None for systems
        that give none (the baselines). Uncalibrated: ``factrl.eval.calibration`` maps it.
    """

    verdict: str | None
    questions: int = 0
    searches: int = 0
    format_valid: bool | None = None
    trajectories: list[tuple[str, Trajectory, bool | None]] = field(default_factory=list)
    raw_confidence: float | None = None


class System(Protocol):
    """A claim verifier: ``run`` takes a batch of claim texts and the retriever to search."""

    name: str

    def run(self, claims: list[str], retriever) -> list[ClaimRun]:
        ...


@dataclass
class HarisSystem:
    """HARIS at one (reasoning, search) checkpoint pair (``factrl.agents.haris``)."""

    name: str
    reason_llm: Any
    search_llm: Any
    top_k: int = 3
    max_new_tokens: int = 64
    max_turns: int = 2

    @property
    def llms(self) -> tuple:
        return (self.reason_llm, self.search_llm)

    def run(self, claims: list[str], retriever) -> list[ClaimRun]:
        from factrl.agents.haris import Haris

        haris = Haris.with_limits(self.reason_llm, retriever, search_llm=self.search_llm, top_k=self.top_k,
                                  max_new_tokens=self.max_new_tokens, max_turns=self.max_turns)
        out = []
        for res in haris.verify(list(claims)):
            searches = [s for s in res.searches if s is not None]
            trajs = [("reasoning", res.trajectory, res.parse.format_valid)]
            trajs += [("search", s.trajectory, s.parse.format_valid) for s in searches]
            out.append(ClaimRun(
                verdict=res.verdict, questions=res.trajectory.num_tool_calls,
                searches=sum(s.trajectory.num_tool_calls for s in searches),
                format_valid=res.parse.format_valid, trajectories=trajs, raw_confidence=res.raw_confidence,
            ))
        return out


@dataclass(frozen=True)
class Baseline:
    """A registered baseline: its name in the report (HARIS rows are named by their checkpoint) and
    ``run(claims, llm, retriever, *, top_k, max_new_tokens, max_turns) -> [ClaimRun]`` over a batch."""

    label: str
    run: Callable[..., list[ClaimRun]]


BASELINES: Registry[Baseline] = Registry("baseline")


def baseline(name: str, label: str) -> Callable:
    """Decorator registering a baseline's batch function in :data:`BASELINES` as ``name``."""

    def deco(fn: Callable[..., list[ClaimRun]]) -> Callable[..., list[ClaimRun]]:
        BASELINES.add(name, Baseline(label, fn))
        return fn

    return deco


# Counts: the single agent asks no questions and searches as it decides; RAG searches once (the
# claim); Decompose-Then-Verify checks every sub-claim (counted as questions) with one search each.


@baseline("single_agent", "Single agent")
def single_agent(claims: list[str], llm, retriever, *, top_k: int, max_new_tokens: int,
                 max_turns: int) -> list[ClaimRun]:
    from factrl.agents import baselines

    params = baselines.default_single_agent_params(max_new_tokens=max_new_tokens, max_turns=max_turns)
    results = baselines.single_agent(claims, llm=llm, retriever=retriever, k=top_k, params=params)
    return [ClaimRun(verdict=r.verdict, searches=r.trajectory.num_tool_calls, format_valid=r.parse.format_valid,
                     trajectories=[("single_agent", r.trajectory, r.parse.format_valid)]) for r in results]


@baseline("rag", "RAG")
def rag(claims: list[str], llm, retriever, *, top_k: int, max_new_tokens: int, max_turns: int) -> list[ClaimRun]:
    from factrl.agents import baselines

    results = baselines.rag(claims, llm=llm, retriever=retriever, k=top_k)
    return [ClaimRun(verdict=r.verdict, searches=len(r.contexts), format_valid=r.verdict is not None,
                     trajectories=[("rag", _call_trace(r), r.verdict is not None)]) for r in results]


@baseline("decompose_verify", "Decomp-Verify")
def decompose_verify(claims: list[str], llm, retriever, *, top_k: int, max_new_tokens: int,
                     max_turns: int) -> list[ClaimRun]:
    from factrl.agents import baselines

    results = baselines.decompose_then_verify(claims, llm=llm, retriever=retriever, k=top_k)
    return [ClaimRun(verdict=r.verdict, questions=len(r.subclaims), searches=len(r.contexts),
                     format_valid=r.verdict is not None,
                     trajectories=[("decompose_verify", _call_trace(r), r.verdict is not None)]) for r in results]


SYSTEMS = ("haris", *BASELINES)  # what params ``evaluate.systems`` and ``--systems`` may name


@dataclass
class BaselineSystem:
    """The baseline registered as ``kind`` in :data:`BASELINES` on one LLM (``factrl.agents.baselines``)."""

    name: str
    kind: str
    llm: Any
    top_k: int = 3
    max_new_tokens: int = 64
    max_turns: int = 2

    @property
    def llms(self) -> tuple:
        return (self.llm,)

    def run(self, claims: list[str], retriever) -> list[ClaimRun]:
        return BASELINES.lookup(self.kind).run(list(claims), self.llm, retriever, top_k=self.top_k,
                                               max_new_tokens=self.max_new_tokens, max_turns=self.max_turns)


def _call_trace(result) -> Trajectory:
    """A trace of a baseline made of single LLM calls (no token ids): per verification, the context
    it read (env) and the parsed verdict (model); sub-claims first for Decompose-Then-Verify."""
    turns: list[tuple[str, str]] = [("env", f"Claim: {result.claim}")]
    if result.subclaims:
        turns.append(("model", "sub-claims:\n" + "\n".join(f"- {s}" for s in result.subclaims)))
    verdicts = result.sub_verdicts or [result.verdict]
    for i, context in enumerate(result.contexts):
        head = f"sub-claim: {result.subclaims[i]}\n" if result.subclaims else ""
        turns.append(("env", f"{head}context:\n{context}"))
        turns.append(("model", f"verdict: {verdicts[i] if i < len(verdicts) else None}"))
    for err in result.errors:
        turns.append(("model", f"error: {err}"))
    turns.append(("model", f"final verdict: {result.verdict}"))
    return Trajectory(prompt_ids=[], response_ids=[], loss_mask=[], turns=turns,
                      response_text="".join(t for _, t in turns), num_tool_calls=len(result.contexts),
                      finish_reason="stop")


def build_systems(names: Sequence[str], checkpoints: Sequence[tuple[str, str, str]], base_model: str, *,
                  load_llm: Callable[[str], Any], top_k: int = 3, max_new_tokens: int = 64,
                  max_turns: int = 2) -> list[System]:
    """Systems by name; ``haris`` once per ``(name, reason, search)`` checkpoint; the baselines on
    ``base_model``. ``load_llm`` maps a model spec to an LLM (called once per distinct spec)."""
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system(s) {unknown}; expected some of {list(SYSTEMS)}")
    cache: dict[str, Any] = {}

    def llm(spec: str):
        if spec not in cache:
            cache[spec] = load_llm(spec)
        return cache[spec]

    limits = {"top_k": top_k, "max_new_tokens": max_new_tokens, "max_turns": max_turns}
    systems: list[System] = []
    for name in names:
        if name == "haris":
            if not checkpoints:
                raise ValueError("system 'haris' needs at least one checkpoint")
            systems += [HarisSystem(label, llm(reason), llm(search), **limits) for label, reason, search in checkpoints]
        else:
            systems.append(BaselineSystem(BASELINES[name].label, name, llm(base_model), **limits))
    return systems


# --------------------------------------------------------------------------------------------
# eval sets and sampling
# --------------------------------------------------------------------------------------------


@dataclass
class EvalSet:
    """Claims (CLAIMS schema) of one eval set and the retriever its systems search.

    positive_only: score accuracy on the SUPPORTS claims only (CHECKWHY); None = by name.
    """

    name: str
    claims: pa.Table
    retriever: Any
    positive_only: bool | None = None

    @property
    def positives_only(self) -> bool:
        if self.positive_only is not None:
            return self.positive_only
        return self.name.lower().replace("-", "").startswith("checkwhy")


def sample_set(eval_set: EvalSet, per_hop: int, seed: int) -> pa.Table:
    """The scored claims: binary labels (SUPPORTS only for CHECKWHY), up to ``per_hop`` per hop with
    balanced labels (``per_hop`` 0 = every claim of those labels)."""
    labels = ("SUPPORTS",) if eval_set.positives_only else BINARY_LABELS
    table = eval_set.claims
    if per_hop <= 0:
        keep = [lab in labels for lab in table.column("label").to_pylist()]
        return table.filter(pa.array(keep, pa.bool_()))
    return stratified_sample(table, per_hop, seed, labels=labels)


# --------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------


def score_rows(dataset: str, system: str, num_hops: int | None, y_true: Sequence[str],
               y_pred: Sequence[str | None], questions: Sequence[int], searches: Sequence[int], *,
               n_boot: int, seed: int, positive_only: bool = False) -> list[dict]:
    """METRICS rows of one (dataset, hop, system) cell: the classification metrics (accuracy only
    for a positives-only set) and the per-claim averages, each with its bootstrap 95% interval."""
    n = len(y_true)
    scores = classification_metrics(y_true, y_pred)
    names = ("accuracy",) if positive_only else METRICS
    base = {"dataset": dataset, "system": system, "num_hops": num_hops, "n": n}
    rows = []
    for metric in names:
        low, high = bootstrap_ci(y_true, y_pred, metric, n_boot=n_boot, seed=seed)
        rows.append(base | {"metric": metric, "value": scores[metric], "ci_low": low, "ci_high": high})
    counts = {"avg_questions": questions, "avg_searches": searches,
              "no_verdict_rate": [float(p is None) for p in y_pred]}
    for metric, values in counts.items():
        low, high = bootstrap_mean_ci(values, n_boot, seed)
        rows.append(base | {"metric": metric, "value": float(np.mean(values)), "ci_low": low, "ci_high": high})
    return rows


def _hop_groups(hops: Sequence[int | None]) -> list[tuple[int | None, list[int]]]:
    groups: dict[int | None, list[int]] = {}
    for i, h in enumerate(hops):
        groups.setdefault(h, []).append(i)
    return sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------


@dataclass
class EvalResult:
    """rows: METRICS rows; predictions: one dict per (dataset, system, claim); trajectories:
    TRAJECTORIES rows of the traced claims; seconds: wall time per (dataset, system); calibration:
    what :func:`apply_calibration` measured (dataset -> system -> hop -> metrics), empty without it."""

    rows: list[dict]
    predictions: list[dict]
    trajectories: list[dict]
    seconds: dict[str, float]
    calibration: dict = field(default_factory=dict)


# one row per (dataset, system, claim): what `evaluate` writes to metrics/predictions.parquet.
# verdict: SUPPORTS | REFUTES | null (none); questions / searches: as ClaimRun's; raw_confidence: the
# system's own P(verdict is right) (ClaimRun.raw_confidence; null for systems without one);
# confidence: raw_confidence through the checkpoint's calibration map (metrics/calibration/; null
# when evaluate.calibration is off or the system has no map)
PREDICTIONS = pa.schema([("dataset", pa.string()), ("system", pa.string()), ("claim_id", pa.string()),
                         ("num_hops", pa.int64()), ("label", pa.string()), ("verdict", pa.string()),
                         ("questions", pa.int64()), ("searches", pa.int64()), ("format_valid", pa.bool_()),
                         ("raw_confidence", pa.float64()), ("confidence", pa.float64())])


def run_system(system: System, claims: list[str], retriever, batch_size: int) -> list[ClaimRun]:
    """``system`` over ``claims`` in batches of ``batch_size`` (one batched rollout each)."""
    out: list[ClaimRun] = []
    for start in range(0, len(claims), max(1, batch_size)):
        batch = claims[start : start + batch_size]
        runs = system.run(batch, retriever)
        if len(runs) != len(batch):
            raise RuntimeError(f"system {system.name!r} returned {len(runs)} results for {len(batch)} claims")
        out += runs
    return out


def _trace_rows(dataset: str, system: str, claim_id: str, label: str, run: ClaimRun) -> list[dict]:
    correct = float(run.verdict == label)
    rows = []
    for i, (agent, traj, valid) in enumerate(run.trajectories):
        row = traj.to_row(id=f"{dataset}/{system}/{claim_id}/{i}", prompt_id=claim_id, agent=agent, round=None,
                          reward=correct, reward_parts={"correct": correct}, format_valid=valid)
        rows.append(row)
    return rows


def free_engine_memory(system: System) -> None:
    """Drop the key/value slots and prefix cache of the local engines behind ``system``.

    Every LLM of every evaluated checkpoint stays loaded for the whole run (the weights are
    small and shared by spec), but each engine keeps up to ``max_batch`` slots of key/value states
    and a prefix cache of up to 2 GiB: one warmed HARIS pair alone reached 10-12 GB of RSS on the
    demo, and every checkpoint's engines kept theirs until the run ended. A system's engines are
    idle once it has scored its claims, so their caches go; weights stay."""
    for llm in getattr(system, "llms", ()):  # systems without local engines (test fakes) have none
        if hasattr(llm, "release"):
            llm.release()
        if hasattr(llm, "clear_prefix_cache"):
            llm.clear_prefix_cache()


def evaluate(sets: Sequence[EvalSet], systems: Sequence[System], *, per_hop: int, seed: int = 0,
             batch_size: int = EvaluateParams.batch_size, n_boot: int = EvaluateParams.n_boot,
             trace_claims: int = EvaluateParams.trace_claims) -> EvalResult:
    """Run every system on every set's sample and score it per hop (see the module docstring)."""
    rows: list[dict] = []
    predictions: list[dict] = []
    traces: list[dict] = []
    seconds: dict[str, float] = {}
    for eval_set in sets:
        sample = sample_set(eval_set, per_hop, seed)
        if sample.num_rows == 0:
            log.warning("eval set %s: no claims with labels to score; skipped", eval_set.name)
            continue
        ids = [str(x) for x in sample.column("id").to_pylist()]
        texts = sample.column("claim").to_pylist()
        labels = sample.column("label").to_pylist()
        hops = sample.column("num_hops").to_pylist()
        for system in systems:
            t0 = time.perf_counter()
            runs = run_system(system, texts, eval_set.retriever, batch_size)
            free_engine_memory(system)
            seconds[f"{eval_set.name}/{system.name}"] = time.perf_counter() - t0
            log.info("%s on %s: %d claims in %.1f s", system.name, eval_set.name, len(texts),
                     seconds[f"{eval_set.name}/{system.name}"])
            for i, run in enumerate(runs):
                predictions.append({"dataset": eval_set.name, "system": system.name, "claim_id": ids[i],
                                    "num_hops": hops[i], "label": labels[i], "verdict": run.verdict,
                                    "questions": run.questions, "searches": run.searches,
                                    "format_valid": run.format_valid, "raw_confidence": run.raw_confidence,
                                    "confidence": None})
                if i < trace_claims:
                    traces += _trace_rows(eval_set.name, system.name, ids[i], labels[i], run)
            for hop, idx in _hop_groups(hops):
                rows += score_rows(
                    eval_set.name, system.name, hop, [labels[i] for i in idx], [runs[i].verdict for i in idx],
                    [runs[i].questions for i in idx], [runs[i].searches for i in idx],
                    n_boot=n_boot, seed=seed, positive_only=eval_set.positives_only)
    return EvalResult(rows, predictions, traces, seconds)


# --------------------------------------------------------------------------------------------
# calibrated confidence
# --------------------------------------------------------------------------------------------


def fit_calibrators(systems: Sequence[System], dev: EvalSet, *, method: str, per_hop: int, seed: int = 0,
                    batch_size: int = EvaluateParams.batch_size, fitted_on: str = "",
                    checkpoints: Mapping[str, Mapping] | None = None) -> tuple[dict, dict]:
    """One calibration map per system that reports a raw confidence (the HARIS checkpoints), fitted
    on ``dev`` (sampled as an eval set: ``per_hop`` claims per hop, balanced labels) with ``method``
    (``factrl.eval.calibration.METHODS``). Returns ``({system: Calibrator}, {system: seconds})``;
    ``checkpoints`` (system -> its models) is stored in each map for readers such as the service."""
    from factrl.eval.calibration import Calibrator

    sample = sample_set(dev, per_hop, seed)
    texts, labels = sample.column("claim").to_pylist(), sample.column("label").to_pylist()
    if not texts:
        log.warning("calibration: no claims sampled from %s (per_hop %d): no maps fitted", dev.name, per_hop)
    fitted, seconds = {}, {}
    for system in systems:
        if not isinstance(system, HarisSystem) or not texts:
            continue
        t0 = time.perf_counter()
        runs = run_system(system, texts, dev.retriever, batch_size)
        free_engine_memory(system)
        seconds[system.name] = time.perf_counter() - t0
        correct = [r.verdict == y for r, y in zip(runs, labels)]
        meta = {"name": system.name, **dict((checkpoints or {}).get(system.name, {}))}
        fitted[system.name] = Calibrator(method, checkpoint=meta).fit(
            [r.raw_confidence for r in runs], correct, fitted_on=fitted_on or dev.name)
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
            for p, c in zip(preds, cal.predict([p["raw_confidence"] for p in preds])):
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
    from factrl.eval.report import markdown_table

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


# --------------------------------------------------------------------------------------------
# loading inputs (shared by the stage and the CLI)
# --------------------------------------------------------------------------------------------


def resolve_checkpoint_pair(checkpoint, where: str, params_file: str | Path = "params.yaml") -> tuple[str, str]:
    """The (reason, search) models of a checkpoint (``factrl.eval.params.CheckpointParams``) read at
    params key ``where`` (``evaluate.checkpoints[0]``, ``serve.checkpoints[1]``), symbolic names
    (``base``, ``warm``, ``last``, ``r<id>``) resolved by :func:`factrl.model_names.resolve_model`. A
    local model directory must exist (a FileNotFoundError naming the key otherwise); an embedded
    name or an endpoint (``openai:MODEL@URL``) is taken as given."""
    from factrl.model_names import resolve_model

    pair = []
    for agent, spec in (("reason", checkpoint.reason), ("search", checkpoint.search)):
        key = f"{where}.{agent}"
        model = resolve_model(spec, agent, where=key, params_file=params_file)
        if parse_spec(model).backend == "local" and "/" in model and not Path(model).expanduser().exists():
            named = spec if spec == model else f"{spec} = {model}"
            raise FileNotFoundError(f"{params_file}: {key}: {named} does not exist "
                                    "(train that round first, or name an existing checkpoint)")
        pair.append(model)
    return pair[0], pair[1]


def paired_gains(predictions: Sequence[Mapping], pairs: Sequence[tuple[str, str]], *, n_boot: int = 1000,
                 seed: int = 0) -> dict:
    """What each system of ``pairs`` gains over the other on the same claims: ``{dataset: {"A - B":
    {hop: {mean, ci95, n}}}}`` with hops ``2hop`` .. and ``pooled``, a paired bootstrap of per-claim
    correctness (:func:`factrl.eval.metrics.paired_bootstrap_diff`); pairs missing from a dataset are
    left out."""
    from factrl.eval.metrics import paired_bootstrap_diff

    right: dict = {}
    for p in predictions:
        right.setdefault(p["dataset"], {}).setdefault(p["system"], {})[p["claim_id"]] = (
            float(p["verdict"] == p["label"]), p["num_hops"])
    out: dict = {}
    for dataset, by_system in right.items():
        for a, b in pairs:
            if a not in by_system or b not in by_system:
                continue
            ids = sorted(set(by_system[a]) & set(by_system[b]))
            groups = {"pooled": ids} | {f"{h}hop": [i for i in ids if by_system[a][i][1] == h]
                                        for h in sorted({by_system[a][i][1] for i in ids} - {None})}
            out.setdefault(dataset, {})[f"{a} - {b}"] = {
                hop: paired_bootstrap_diff([by_system[a][i][0] for i in g], [by_system[b][i][0] for i in g],
                                           n_boot=n_boot, seed=seed)
                for hop, g in groups.items() if g}
    return out


def passages_index(passages: str | Path, root: str | Path) -> Path:
    """A BM25 index of a passage file (JSONL or PASSAGES Parquet) under ``root``, keyed by the file's
    content hash, so an unchanged file is indexed once; returns the index directory."""
    from factrl.data.schemas import PASSAGES
    from factrl.data.sources import read_passages
    from factrl.io import write_parquet
    from factrl.retrieval.index import MANIFEST, build_index

    passages = Path(passages)
    digest = hashlib.sha256(passages.read_bytes()).hexdigest()[:16]
    out = Path(root) / f"{passages.stem}-{digest}"
    if (out / MANIFEST).exists():
        return out
    parquet = out.with_name(out.name + ".passages.parquet")
    write_parquet(read_passages(passages), parquet, PASSAGES)
    build_index(parquet, out, embedder=None, bm25=True)
    parquet.unlink()
    return out


def load_llm(spec: str, device="auto", precision: str = "auto"):
    """The LLM of an LLM spec: a local engine for a model directory or an embedded name (on
    ``device``, with ``precision`` weights), or an OpenAI-compatible endpoint (``openai:MODEL@URL``; see
    ``factrl.llm.backends``) behind the on-disk LLM cache: evaluation decodes greedily, so a rerun of
    an evaluation against a paid API is answered from the cache and pays nothing."""
    from factrl.llm.backends import load_llm as load
    from factrl.llm.cache import DiskCache

    return load(spec, device=device, precision=precision, disk_cache=DiskCache())


# --------------------------------------------------------------------------------------------
# outputs (shared by the stage and the CLI)
# --------------------------------------------------------------------------------------------


def write_outputs(result: EvalResult, *, metrics_path: Path, report_path: Path, plots_dir: Path,
                  traces_path: Path, title: str, notes: Sequence[str] = (),
                  reward_points: Sequence[Mapping] = (), predictions_path: Path | None = None,
                  gains: Mapping | None = None, gains_path: Path | None = None,
                  calibration_path: Path | None = None, calibration_maps: Mapping | None = None) -> dict[str, Path]:
    """metrics JSON, the markdown report (Table 1 layout), plots, and the trace page; with
    ``predictions_path`` every claim's verdict per system (Parquet), with ``gains_path`` the paired
    gains (:func:`paired_gains`); with ``calibration_path`` the calibration measurements of
    :func:`apply_calibration` (JSON: reliability bins and coverage curves per dataset, system and hop,
    and each map's method and size), a reliability plot and a report section."""
    import os

    from factrl.eval import plots
    from factrl.eval.report import write_report
    from factrl.eval.traces import trace_page
    from factrl.io import write_json, write_text

    written = {}
    write_json(nested_metrics(result.rows), metrics_path)
    written["metrics"] = metrics_path
    if predictions_path is not None:  # written even when empty: the stage's DVC output must exist
        from factrl.io import write_parquet

        write_parquet(pa.Table.from_pylist(result.predictions, schema=PREDICTIONS), predictions_path)
        written["predictions"] = predictions_path
    if gains_path is not None:
        write_json(gains, gains_path)
        written["gains"] = gains_path
    images = []
    if any(r["metric"] == "accuracy" for r in result.rows):
        written["accuracy_plot"] = plots.render(plots.accuracy_per_hop_spec(result.rows),
                                                plots_dir / "accuracy.png")
        images.append(written["accuracy_plot"])
    if reward_points:
        written["reward_plot"] = plots.render(plots.reward_curve_spec(reward_points), plots_dir / "reward_curves.png")
        images.append(written["reward_plot"])
    sections = []
    if calibration_path is not None:
        maps = dict(calibration_maps or {})
        write_json({"maps": {name: cal.to_dict() for name, cal in maps.items()},
                    "measured": result.calibration}, calibration_path)
        written["calibration"] = calibration_path
        if result.calibration:
            written["reliability_plot"] = plots.render(plots.reliability_spec(result.calibration),
                                                       plots_dir / "reliability.png")
            images.append(written["reliability_plot"])
            sections.append(("Calibrated confidence", calibration_markdown(result.calibration, maps)))
    rel = [os.path.relpath(p, report_path.parent) for p in images]
    written["report"] = write_report(result.rows, report_path, title=title, notes=notes, plots=rel,
                                     sections=sections)
    write_text(trace_page(result.trajectories, title=f"{title}: traces"), traces_path)
    written["traces"] = traces_path
    return written


# --------------------------------------------------------------------------------------------
# CLI: factrl evaluate
# --------------------------------------------------------------------------------------------


def cli_parser() -> argparse.ArgumentParser:
    """``factrl evaluate``'s arguments."""
    parser = argparse.ArgumentParser(
        prog="factrl evaluate",
        description="Evaluate fact-checking systems on a claim file: the passages are indexed first "
                    "(into OUT/index), then every system runs on a per-hop sample with balanced labels. "
                    "Writes OUT/metrics.json, OUT/eval.md (HARIS Table 1 layout), OUT/plots/ and "
                    "OUT/traces.html.")
    parser.add_argument("--claims", required=True, help="claim file (JSONL in the shared-data format, or Parquet)")
    parser.add_argument("--passages", required=True, help="passages to search (JSONL {id, title, text} or Parquet)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS, help="systems to run")
    parser.add_argument("--checkpoint", nargs=2, action="append", metavar=("REASON", "SEARCH"),
                        help="a HARIS (reasoning, search) model pair: directories, embedded names or LLM specs "
                             "(openai:MODEL@URL); repeatable (default: --base-model for both)")
    parser.add_argument("--base-model", default="smollm2-135m", help="model of the baselines (default smollm2-135m)")
    # the shared options default to the stage's params (factrl.eval.params.EvaluateParams), so a claim file is
    # scored as `evaluate` scores the demo; a test compares them
    parser.add_argument("--per-hop", type=int, default=EvaluateParams.per_hop,
                        help=f"claims per hop, labels balanced (0 = all; default {EvaluateParams.per_hop})")
    parser.add_argument("--seed", type=int, default=EvaluateParams.seed)
    parser.add_argument("--embedder", default="none", choices=("none", "minilm", "e5-nano", "e5-hub"),
                        help="dense embedder for the index; 'none' (default) builds BM25 only, the fast choice; "
                             "with an embedder, searches are hybrid (BM25 + dense, RRF)")
    parser.add_argument("--top-k", type=int, default=EvaluateParams.top_k,
                        help=f"passages per search (default {EvaluateParams.top_k}, as HARIS)")
    parser.add_argument("--max-new-tokens", type=int, default=EvaluateParams.max_new_tokens,
                        help=f"tokens per agent turn (default {EvaluateParams.max_new_tokens})")
    parser.add_argument("--max-turns", type=int, default=EvaluateParams.max_turns,
                        help=f"questions / searches per rollout (default {EvaluateParams.max_turns}: a 4-hop claim "
                             "takes 4, and one spare)")
    parser.add_argument("--batch-size", type=int, default=EvaluateParams.batch_size,
                        help="claims per batched system call (see factrl.eval.params.EvaluateParams)")
    parser.add_argument("--device", default="auto", help="where the models run: auto (CUDA when visible, else CPU), "
                                                          "cpu, cuda or cuda:N")
    parser.add_argument("--n-boot", type=int, default=EvaluateParams.n_boot,
                        help=f"bootstrap resamples (default {EvaluateParams.n_boot})")
    parser.add_argument("--trace-claims", type=int, default=EvaluateParams.trace_claims,
                        help="claims per system on the trace page")
    parser.add_argument("--name", default=None, help="dataset name in the report (default: the claim file's stem)")
    add_endpoint_args(parser)
    return parser


def main(argv: list[str] | None = None, *, llm_loader: Callable[[str], Any] | None = None) -> int:
    """``factrl evaluate``: the evaluation on any claim file in the shared-data format."""
    args = cli_parser().parse_args(argv)

    from factrl.data.schemas import PASSAGES
    from factrl.data.sources import read_claims, read_passages
    from factrl.io import write_parquet
    from factrl.retrieval.index import Retriever, build_index

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(args.out)
    claims = read_claims(args.claims)
    passages_file = out / "passages.parquet"
    write_parquet(read_passages(args.passages), passages_file, PASSAGES)
    embedder = None if args.embedder == "none" else args.embedder
    build_index(passages_file, out / "index", embedder=embedder, bm25=True)
    retriever = Retriever(out / "index", mode="bm25" if embedder is None else "hybrid")
    def short(spec: str) -> str:
        return Path(parse_spec(spec).model).name

    checkpoints = [(f"HARIS ({short(r)})" if r == s else f"HARIS ({short(r)}+{short(s)})",
                    routed(args, r), routed(args, s))
                   for r, s in (args.checkpoint or [(args.base_model, args.base_model)])]
    from factrl.hardware import resolve_device

    device = resolve_device(args.device, key="--device")
    systems = build_systems(args.systems, checkpoints, routed(args, args.base_model),
                            load_llm=llm_loader or functools.partial(load_llm, device=device),
                            top_k=args.top_k, max_new_tokens=args.max_new_tokens, max_turns=args.max_turns)
    name = args.name or Path(args.claims).stem
    result = evaluate([EvalSet(name, claims, retriever)], systems, per_hop=args.per_hop, seed=args.seed,
                      batch_size=args.batch_size, n_boot=args.n_boot, trace_claims=args.trace_claims)
    notes = [f"claims: {args.claims} ({claims.num_rows} rows); passages: {args.passages}",
             f"sample: up to {args.per_hop} claims per hop, balanced labels, seed {args.seed}",
             f"retrieval: {'BM25' if embedder is None else 'hybrid BM25 + ' + embedder}, top-{args.top_k}; "
             f"{args.max_new_tokens} new tokens per turn, {args.max_turns} turns",
             f"baselines on {routed(args, args.base_model)}"]
    written = write_outputs(result, metrics_path=out / "metrics.json", report_path=out / "eval.md",
                            plots_dir=out / "plots", traces_path=out / "traces.html",
                            title=f"Evaluation: {name}", notes=notes)
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return 0
