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

The systems are ``factrl.eval.systems``'s; the calibrated confidence measured on top of a run is
``factrl.eval.calibration_run``'s, the files written from it ``factrl.eval.outputs``'s, and
``factrl evaluate`` (``factrl.eval.cli``) runs the same evaluation on any claim file.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from factrl.agents.systems_registry import ClaimRun
from factrl.eval.metrics import METRICS, bootstrap_ci, bootstrap_mean_ci, classification_metrics
from factrl.eval.params import EvaluateParams
from factrl.eval.sampling import stratified_sample
from factrl.eval.systems import System
from factrl.eval.workers import RunFn, run_here
from factrl.llm.backends import parse_spec

log = logging.getLogger(__name__)

BINARY_LABELS = ("SUPPORTS", "REFUTES")
COUNT_METRICS = ("avg_questions", "avg_searches", "no_verdict_rate")


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
    what :func:`factrl.eval.calibration_run.apply_calibration` measured (dataset -> system -> hop ->
    metrics), empty without it."""

    rows: list[dict]
    predictions: list[dict]
    trajectories: list[dict]
    seconds: dict[str, float]
    calibration: dict = field(default_factory=dict)


# one row per (dataset, system, claim): what `evaluate` writes to metrics/predictions.parquet.
# verdict: SUPPORTS | REFUTES | null (none); questions / searches: as ClaimRun's; raw_confidence: the
# system's own P(verdict is right) (ClaimRun.raw_confidence; null for systems without one);
# confidence: raw_confidence through the checkpoint's calibration map (metrics/calibration/; null
# when evaluate.calibration is off or the system has no map); outcome: the verdict, or NOT ENOUGH INFO
# where params abstain decided the run's evidence too thin (factrl.eval.abstention); abstained: which
# (null for systems without citations, the baselines); subject_cited / answered_share: the grounding
# that decision read (factrl.agents.abstain.Grounding)
PREDICTIONS = pa.schema([("dataset", pa.string()), ("system", pa.string()), ("claim_id", pa.string()),
                         ("num_hops", pa.int64()), ("label", pa.string()), ("verdict", pa.string()),
                         ("questions", pa.int64()), ("searches", pa.int64()), ("format_valid", pa.bool_()),
                         ("raw_confidence", pa.float64()), ("confidence", pa.float64()),
                         ("outcome", pa.string()), ("abstained", pa.bool_()), ("subject_cited", pa.bool_()),
                         ("answered_share", pa.float64())])


def _trace_rows(dataset: str, system: str, claim_id: str, label: str, run: ClaimRun) -> list[dict]:
    correct = float(run.verdict == label)
    rows = []
    for i, (agent, traj, valid) in enumerate(run.trajectories):
        row = traj.to_row(id=f"{dataset}/{system}/{claim_id}/{i}", prompt_id=claim_id, agent=agent, round=None,
                          reward=correct, reward_parts={"correct": correct}, format_valid=valid)
        rows.append(row)
    return rows


def evaluate(sets: Sequence[EvalSet], systems: Sequence[System], *, per_hop: int, seed: int = 0,
             batch_size: int = EvaluateParams.batch_size, n_boot: int = EvaluateParams.n_boot,
             trace_claims: int = EvaluateParams.trace_claims, run: RunFn = run_here) -> EvalResult:
    """Run every system on every set's sample and score it per hop (see the module docstring);
    ``run`` makes each run (:func:`factrl.eval.workers.prefetch`'s answers what workers ran)."""
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
            runs, seconds[f"{eval_set.name}/{system.name}"] = run(system, texts, eval_set.retriever, batch_size)
            log.info("%s on %s: %d claims in %.1f s", system.name, eval_set.name, len(texts),
                     seconds[f"{eval_set.name}/{system.name}"])
            for i, claim_run in enumerate(runs):
                predictions.append({"dataset": eval_set.name, "system": system.name, "claim_id": ids[i],
                                    "num_hops": hops[i], "label": labels[i], "verdict": claim_run.verdict,
                                    "questions": claim_run.questions, "searches": claim_run.searches,
                                    "format_valid": claim_run.format_valid, "raw_confidence": claim_run.raw_confidence,
                                    "confidence": None, "grounding": claim_run.grounding,
                                    "outcome": claim_run.verdict, "abstained": None,
                                    "subject_cited": claim_run.grounding.subject_cited if claim_run.grounding else None,
                                    "answered_share": claim_run.grounding.answered_share if claim_run.grounding else None})
                if i < trace_claims:
                    traces += _trace_rows(eval_set.name, system.name, ids[i], labels[i], claim_run)
            for hop, idx in _hop_groups(hops):
                rows += score_rows(
                    eval_set.name, system.name, hop, [labels[i] for i in idx], [runs[i].verdict for i in idx],
                    [runs[i].questions for i in idx], [runs[i].searches for i in idx],
                    n_boot=n_boot, seed=seed, positive_only=eval_set.positives_only)
    return EvalResult(rows, predictions, traces, seconds)


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
