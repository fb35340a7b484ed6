"""Stage ``evaluate``'s parameters: the eval sets, the HARIS checkpoints against the baselines
(``factrl.eval.systems``), and the calibration map fitted per checkpoint (``factrl.eval.calibration``).
The service (``factrl.service.params``) answers with the same limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from factrl.config import Device, names_from, params_section


def _system_names():
    # the systems and the agents they run: imported when params load, not with this module (stage
    # index reads EvalSetParams)
    from factrl.agents.systems_registry import system_names

    return system_names()


def _calibration_methods():
    from factrl.eval.calibration import METHODS  # numpy: imported when params load

    return ("none", *METHODS)


@dataclass(frozen=True)
class EvalSetParams:
    """One evaluation claim set: a local file (JSONL in the shared-data format, or CLAIMS Parquet)
    or a Hugging Face hub dataset (real scale; needs network).

    name: the dataset name in metrics and the report (``hover_2hop`` ... map onto Table 1's columns).
    path: the claim file (relative to the repository root); empty when ``hub`` is set.
    hub: a hub dataset name from ``factrl.data.sources.HUB_DATASETS`` (``hover``, ``exfever``); empty
        for a file.
    split: the hub split to read (hub sets only).
    passages: passages to search for this set instead of ``index/`` (JSONL or PASSAGES Parquet),
        indexed with BM25 once into the factrl cache; empty = the pipeline's ``index/``.
    index: an index directory built by stage ``index``'s code over this set's own passages (BM25 and
        dense), searched with ``evaluate.retrieval_mode`` as ``index/`` is, so a set of another world
        is searched the same way as the pipeline's own (bench/learning.py's unseen world); exclusive
        with ``passages``.
    optional: a missing file is skipped with a logged message instead of failing the stage.
    """

    name: str
    path: str = ""
    hub: str = ""
    split: str = "validation"
    passages: str = ""
    index: str = ""
    optional: bool = False


@dataclass(frozen=True)
class CheckpointParams:
    """One HARIS checkpoint pair to evaluate (a row of the report).

    name: the system's name in metrics and the report (e.g. ``HARIS (trained)``).
    reason: the reasoning agent: a symbolic name (``base``, ``warm``, ``last``, ``r<id>``: see
        :func:`resolve_model`; ``last`` = models/reason_<highest round id>), a model directory, an
        embedded model name, or an OpenAI-compatible endpoint (``openai:MODEL@URL``, e.g. the checkpoint
        behind ``factrl serve-agent``, or ``openai:gpt-4o-mini`` as a prompted agent; see
        ``factrl.llm.backends``).
    search: the search agent, the same way (``last`` = models/search_<highest round id>).
    """

    name: str
    reason: str
    search: str


@dataclass(frozen=True)
class OutOfCorpusParams:
    """``evaluate.calibration.out_of_corpus``: claims the served corpus holds no evidence for, labelled NOT
    ENOUGH INFO, added to the dev claims the calibration maps are fitted on, so confidence falls where
    evidence is missing (``factrl.data.out_of_corpus``). A verdict on one of them is never right.

    generated: claims of a shadow demo world (the same templates, another seed) naming no entity of the
        index's passages.
    real: real claims from ``real_files`` whose subject no passage of the index mentions, split evenly
        over the files.
    real_files: shared-data claim files (JSONL); a missing file is skipped (a clone without ../shared).
    seed: the shadow world's seed offset and the real claims' sampling seed.
    """

    generated: int = 0
    real: int = 0
    real_files: tuple[str, ...] = ()
    seed: int = 0

    @property
    def enabled(self) -> bool:
        return self.generated + self.real > 0


@dataclass(frozen=True)
class CalibrationParams:
    """``evaluate.calibration``: the calibration map fitted per HARIS checkpoint during ``evaluate``
    (``factrl.eval.calibration``), saved to ``metrics/calibration/<checkpoint-slug>.json``.

    method: ``isotonic``, ``temperature`` (the raw score alone) or ``grounded`` (the raw score and the
        run's evidence: how much of the claim its citations mention; any name of
        ``factrl.eval.calibration.METHODS``), or ``none`` to skip it (no dev claims evaluated, no maps
        written, no calibration metrics).
    dev_set: the claim file the maps are fitted on; never the eval claims: the demo world's dev
        split, which no stage trains on.
    dev_per_hop: dev claims per hop setting, balanced labels (0 = the whole file); every HARIS
        checkpoint runs on them once, on top of the evaluation itself.
    out_of_corpus: out-of-corpus claims (NOT ENOUGH INFO) joining the dev claims (see
        :class:`OutOfCorpusParams`; none by default).
    checkpoints: names of the ``evaluate.checkpoints`` that get a map (empty: every one). A map costs
        its checkpoint a run over the dev claims, and only the served checkpoint's map is read by
        ``factrl serve``; the others keep their raw confidence (ECE before calibration only).
    """

    method: str = names_from(_calibration_methods, "grounded")
    dev_set: str = "data/claims/dev.parquet"
    dev_per_hop: int = 10
    out_of_corpus: OutOfCorpusParams = field(default_factory=OutOfCorpusParams)
    checkpoints: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.method != "none"


@params_section("evaluate")
@dataclass(frozen=True)
class EvaluateParams:
    """Stage ``evaluate``: accuracy and weighted P/R/F1 per dataset and hop, HARIS against baselines.

    sets: the eval sets (see :class:`EvalSetParams`); each is sampled per hop with balanced labels.
    real_sets: the real claim sets (HOVER, EX-FEVER, CHECKWHY), evaluated only when ``real`` is on or
        by ``make eval-real`` (``python -m stages.evaluate --real``: these sets alone, into
        ``metrics/eval_real.json`` and ``reports/eval_real.md``), so a model that cannot pass them
        costs the demo no time.
    real: also evaluate ``real_sets`` in the stage (into ``metrics/eval.json`` with ``sets``).
    per_hop: claims sampled per hop setting (balanced labels, seeded; the paper uses 500; 0 = all).
    seed: seed of the sampling and of the bootstrap.
    systems: which systems run, names of ``factrl.agents.systems_registry.SYSTEMS``: ``haris`` (a pair
        system: once per checkpoint) and the baselines (``single_agent``, ``rag``, ``decompose_verify``).
    checkpoints: the HARIS checkpoints, one report row each (see :class:`CheckpointParams`); default
        base, warm and trained: HARIS on ``base`` (params ``model.base``), on ``warm`` (the warm start's
        models/*_0) and on ``last`` (the last round of params ``rounds``), so adding a round moves the
        trained row to it. The stage depends on all of ``models/`` in dvc.yaml, so any checkpoint
        named here reruns the evaluation when it is retrained.
    base_model: the model of the baselines (RAG, Decompose-Then-Verify, single agent): ``base``
        (default: params ``model.base``), a model, or an LLM spec like the checkpoints' (the paper's
        baselines: ``openai:gpt-4o``).
    retrieval_mode: how every system searches ``index/`` (``bm25``, ``dense`` or ``hybrid``).
    top_k: passages per search (the paper's top-3).
    max_new_tokens: generation budget per agent turn.
    max_turns: questions the reasoning agent may ask (and searches the search / single agent may run).
    batch_size: claims handed to a system in one batched call. A local engine decodes at most
        ``max_batch`` (32) rows at a time and admits the next claim as soon as a row finishes, so a
        batch larger than that only removes the idle tail each batch ends with (a warmed HARIS pair
        on 180 demo claims, AVX2, fp32: 815 s at 16, 477 s at 180, the same verdicts; 7.5 GB RSS).
    n_boot: bootstrap resamples of each 95% interval.
    workers: processes the evaluation's runs go to on the CPU, side by side, with the cores split
        between them (``factrl.eval.workers``; 1 = all in the stage's process; on a GPU always 1).
        Each system on each set, and each calibrated checkpoint on the dev claims, is one run; a
        worker loads a model once. On 2 AVX2 cores two 1-thread workers ran two HARIS pairs in 0.69x
        the time of one 2-thread process (a 135M engine's batch-32 decode gains little from a
        second thread; docs/engine.md).
    trace_claims: claims per (dataset, system) whose trajectories go to ``reports/traces.html``.
    device: where the evaluated models run: ``auto``, ``cpu``, ``cuda[:n]``.
    precision: weights of the evaluated local models: ``auto`` (bf16 only where the hardware computes
        it natively; see ``factrl.hardware``), ``bf16`` or ``fp32`` (e.g. bf16-trained checkpoints
        decoded in fp32, to tell a training effect from a decoding one).
    calibration: the confidence calibration map fitted per HARIS checkpoint on dev claims (see
        :class:`CalibrationParams`; ``method: none`` skips it).
    """

    sets: tuple[EvalSetParams, ...] = (EvalSetParams(name="demo", path="data/claims/eval.parquet"),)
    real_sets: tuple[EvalSetParams, ...] = ()
    real: bool = False
    per_hop: int = 40
    seed: int = 0
    systems: tuple[str, ...] = names_from(_system_names, ("haris", "single_agent", "rag", "decompose_verify"))
    checkpoints: tuple[CheckpointParams, ...] = (
        CheckpointParams("HARIS (base)", "base", "base"),
        CheckpointParams("HARIS (warm)", "warm", "warm"),
        CheckpointParams("HARIS (trained)", "last", "last"),
    )
    base_model: str = "base"
    retrieval_mode: Literal["bm25", "dense", "hybrid"] = "hybrid"
    top_k: int = 3
    max_new_tokens: int = 64
    max_turns: int = 5
    batch_size: int = 256
    n_boot: int = 1000
    workers: int = 2
    trace_claims: int = 4
    device: Device = "auto"
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    calibration: CalibrationParams = field(default_factory=CalibrationParams)
