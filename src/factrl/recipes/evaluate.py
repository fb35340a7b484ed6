"""The evaluate recipe (stage ``evaluate``, ``make eval-real``): HARIS checkpoints against the baselines
on every eval set (the paper's Table 1), the run behind ``stages/evaluate.py``.

:func:`run_evaluate` loads the eval sets of params ``evaluate.sets`` (the demo world's
data/claims/eval.parquet) and, when switched on, ``evaluate.real_sets`` (each searched over its own
passages, or over index/ for sets without their own), resolves the HARIS checkpoints of
``evaluate.checkpoints`` (by default base, warm and trained), builds the systems, fits the calibration
maps, evaluates, adds the SC-MAKS systems (consensus/predictions.parquet of stage fit_consensus,
scored as dataset ``demo_debate``) and the paired gains between successive checkpoints, and returns
all of it with the report's notes as an :class:`EvaluateRun`; the stage writes it with
:func:`factrl.eval.outputs.write_outputs`.

Calibrated confidence (params ``evaluate.calibration``; ``method: none`` skips it): every HARIS
checkpoint first runs on a sample of ``calibration.dev_set`` (the dev split: never the eval claims),
a map from its raw confidence to P(right) is fitted there and saved to
metrics/calibration/<checkpoint-slug>.json (what ``factrl serve`` loads; written here, before the
evaluation); the eval predictions get the calibrated ``confidence``. ``real_only`` (``make
eval-real``) reuses the saved maps instead of fitting new ones.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from factrl.agents.abstain import AbstainParams, load_abstain_params
from factrl.config import ConfigError
from factrl.eval import calibration_run, runner, workers
from factrl.eval.abstention import abstention_rows, apply_abstention
from factrl.eval.params import EvalSetParams, EvaluateParams
from factrl.eval.stats import consensus_rows
from factrl.eval.systems import build_systems, load_llm
from factrl.hardware import resolve_device, resolve_precision
from factrl.model_names import resolve_model
from factrl.rl.step_log import curve_dirs, read_history

log = logging.getLogger(__name__)

TRAIN_METRICS = Path("metrics/train")
CONSENSUS_PREDICTIONS = Path("consensus/predictions.parquet")
# metrics/train/reason_r2, metrics/train/search_r3, ... (DVCLive directories): agent and round from the name
_TRAIN_FILE = re.compile(r"(reason|search)\w*?_r?(\d+)")


def resolve_checkpoints(params: EvaluateParams, params_file: str | Path = "params.yaml"
                        ) -> list[tuple[str, str, str]]:
    """(name, reason model, search model) per checkpoint of ``evaluate.checkpoints``, symbolic names
    (``base``, ``warm``, ``last``, ``r<id>``) resolved by :func:`factrl.model_names.resolve_model`. A model
    directory must exist; an endpoint (``openai:MODEL@URL``) is taken as given."""
    if "haris" in params.systems and not params.checkpoints:
        raise ConfigError(f"{params_file}:evaluate.checkpoints: empty, but systems has haris "
                          "(list e.g. {name: HARIS (trained), reason: last, search: last}, or drop haris)")
    return [(c.name, *runner.resolve_checkpoint_pair(c, f"evaluate.checkpoints[{i}]", params_file))
            for i, c in enumerate(params.checkpoints)]


def chosen_sets(params: EvaluateParams, real_only: bool = False) -> list[tuple[str, EvalSetParams]]:
    """``(params key, spec)`` of every set to evaluate: ``sets`` (and ``real_sets`` when ``real`` is
    on), or ``real_sets`` alone for ``make eval-real``."""
    demo = [] if real_only else [(f"evaluate.sets[{i}]", s) for i, s in enumerate(params.sets)]
    real = [(f"evaluate.real_sets[{i}]", s) for i, s in enumerate(params.real_sets)] if real_only or params.real else []
    return demo + real


def load_sets(params: EvaluateParams, index_dir: Path = Path("index"), real_only: bool = False
              ) -> tuple[list[runner.EvalSet], list[str]]:
    """The eval sets with their retrievers, and a note per skipped optional set."""
    from factrl.data.sources import load_hub_claims, read_claims
    from factrl.llm.models import cache_dir
    from factrl.retrieval.index import Retriever

    sets, skipped = [], []
    retrievers: dict[str, Any] = {}

    def retriever(spec: EvalSetParams):
        key = spec.passages or spec.index or str(index_dir)
        if key not in retrievers:
            if spec.passages:
                retrievers[key] = Retriever(runner.passages_index(spec.passages, cache_dir() / "eval_index"), mode="bm25")
            else:  # the pipeline's index/, or a set's own index built the same way: the same search
                retrievers[key] = Retriever(Path(spec.index) if spec.index else index_dir, mode=params.retrieval_mode)
        return retrievers[key]

    for key, spec in chosen_sets(params, real_only):
        where = f"params.yaml: {key} ({spec.name})"
        if bool(spec.path) == bool(spec.hub):
            raise ValueError(f"{where}: set exactly one of path and hub")
        if spec.passages and spec.index:
            raise ValueError(f"{where}: set at most one of passages (searched with BM25) and index")
        missing = [p for p in (spec.path, spec.passages, spec.index) if p and not Path(p).exists()]
        if missing:
            if not spec.optional:
                raise FileNotFoundError(f"{where}: {missing[0]} does not exist")
            msg = f"{spec.name}: skipped, {missing[0]} not found"
            log.info("evaluate: %s", msg)
            skipped.append(msg)
            continue
        claims = read_claims(spec.path) if spec.path else load_hub_claims(spec.hub, spec.split)
        sets.append(runner.EvalSet(spec.name, claims, retriever(spec)))
    return sets, skipped


def load_dev_set(params: EvaluateParams, sets: list[runner.EvalSet], index_dir: Path = Path("index")
                 ) -> runner.EvalSet:
    """The calibration's dev claims (``calibration.dev_set``), searched like the demo sets: over
    ``index/`` (the retriever of the first set that searches it, else a new one)."""
    from factrl.data.sources import read_claims
    from factrl.retrieval.index import Retriever

    path = Path(params.calibration.dev_set)
    if not path.exists():
        raise FileNotFoundError(f"params.yaml: evaluate.calibration.dev_set: {path} does not exist "
                                "(run prepare, or set evaluate.calibration.method: none)")
    own = {s.name for _, s in chosen_sets(params) if s.passages or s.index}
    shared = next((s.retriever for s in sets if s.name not in own), None)
    retriever = shared if shared is not None else Retriever(index_dir, mode=params.retrieval_mode)
    return runner.EvalSet(f"dev ({path})", read_claims(path), retriever)


def out_of_corpus_set(spec, index_dir: Path = Path("index")):
    """The out-of-corpus dev claims of ``evaluate.calibration.out_of_corpus`` (``spec``): generated and
    real claims that the index's passages hold no evidence for (``factrl.data.out_of_corpus``)."""
    import pyarrow.parquet as pq

    from factrl.data.out_of_corpus import out_of_corpus_claims

    passages = pq.read_table(index_dir / "passages.parquet", columns=["title", "text"])
    claims = out_of_corpus_claims(passages, generated=spec.generated, real_files=spec.real_files, real=spec.real,
                                  seed=spec.seed)
    log.info("calibration: %d out-of-corpus dev claims (%d generated, %d real asked)", claims.num_rows,
             spec.generated, spec.real)
    return claims


@dataclass(frozen=True)
class CalibrationInputs:
    """What the calibration runs: the checkpoints that get a map (``systems``, with the baselines,
    which fit none), the dev claims and the out-of-corpus claims joining them (None when off)."""

    systems: list
    dev: runner.EvalSet
    out_of_corpus: Any = None

    def claims(self, params: EvaluateParams) -> list[str]:
        return calibration_run.dev_claims(self.dev, params.calibration.dev_per_hop, params.seed,
                                          self.out_of_corpus)[0]


def calibration_inputs(params: EvaluateParams, sets: list[runner.EvalSet], systems: list,
                       checkpoints: list) -> CalibrationInputs | None:
    """The calibration's systems and claims (see :func:`calibrate`); None with calibration off."""
    cal = params.calibration
    if not cal.enabled:
        return None
    names = [name for name, _, _ in checkpoints]
    unknown = sorted(set(cal.checkpoints) - set(names))
    if unknown:  # e.g. a run that evaluates the base pair alone: nothing of those to calibrate
        log.warning("calibration: %s of evaluate.calibration.checkpoints not evaluated here (%s): no map for them",
                    unknown, names)
    chosen = set(cal.checkpoints or names)
    systems = [s for s in systems if s.name in chosen or s.name not in names]  # baselines fit no map anyway
    outside = out_of_corpus_set(cal.out_of_corpus) if cal.out_of_corpus.enabled else None
    return CalibrationInputs(systems, load_dev_set(params, sets), outside)


def calibrate(params: EvaluateParams, inputs: CalibrationInputs | None, checkpoints: list, out_dir: Path, *,
              run: workers.RunFn = workers.run_here) -> tuple[dict, list[str]]:
    """Fit and save one calibration map per HARIS checkpoint of ``inputs`` (see the module
    docstring; ``run`` makes the dev runs); returns the maps by system name and report notes."""
    from factrl.eval.calibration import calibration_path

    cal = params.calibration
    out_dir.mkdir(parents=True, exist_ok=True)  # a DVC output: it exists (empty) with calibration off
    for stale in out_dir.glob("*.json"):
        stale.unlink()  # maps of checkpoints no longer evaluated, or of a run with calibration on
    if inputs is None:
        return {}, ["calibration: off (evaluate.calibration.method: none)"]
    models = {name: {"reason": reason, "search": search} for name, reason, search in checkpoints}
    outside = inputs.out_of_corpus
    mix = f" + {outside.num_rows} out-of-corpus claims" if outside is not None else ""
    maps, seconds = calibration_run.fit_calibrators(
        inputs.systems, inputs.dev, method=cal.method, per_hop=cal.dev_per_hop, seed=params.seed,
        batch_size=params.batch_size,
        fitted_on=f"{cal.dev_set} (up to {cal.dev_per_hop or 'all'} claims per hop, seed {params.seed}){mix}",
        checkpoints=models, out_of_corpus=outside, run=run)
    for name, calibrator in maps.items():
        calibrator.save(calibration_path(name, out_dir))
    notes = [f"calibration: {cal.method} map per HARIS checkpoint on {cal.dev_set}, "
             + ", ".join(f"{n}: {m.n} dev claims in {seconds[n]:.0f} s" for n, m in maps.items())]
    return maps, notes


def planned_runs(params: EvaluateParams, sets: list[runner.EvalSet], systems: list,
                 calibration: CalibrationInputs | None) -> list[workers.RunJob]:
    """Every run the evaluation will make, for the workers: each calibrated checkpoint on the dev
    claims, each system on each set's sample (the samples :func:`factrl.eval.runner.evaluate` draws)."""
    jobs = []
    if calibration is not None:
        texts = tuple(calibration.claims(params))
        jobs += [workers.RunJob(s, texts, calibration.dev.retriever, params.batch_size)
                 for s in calibration.systems if calibration_run.is_calibrated(s) and texts]
    for eval_set in sets:
        texts = tuple(runner.sample_set(eval_set, params.per_hop, params.seed).column("claim").to_pylist())
        jobs += [workers.RunJob(s, texts, eval_set.retriever, params.batch_size) for s in systems if texts]
    return jobs


def reward_points(train_dir: Path = TRAIN_METRICS) -> list[dict]:
    """Mean reward per step of every training run under ``train_dir`` (each run's DVCLive directory,
    :mod:`factrl.rl.step_log`; agent and round read from its name, e.g. reason_r2 or search_r3)."""
    points = []
    for run_dir in curve_dirs(train_dir):
        m = _TRAIN_FILE.search(run_dir.name)
        if m is None:
            continue
        for row in read_history(run_dir):
            if isinstance(row.get("reward_mean"), float):
                points.append({"agent": m.group(1), "round": int(m.group(2)), "step": row["step"],
                               "reward": row["reward_mean"]})
    return points


@dataclass(frozen=True)
class EvaluateRun:
    """What :func:`run_evaluate` returns, the arguments of ``factrl.eval.outputs.write_outputs``:
    ``result`` the runner's rows, predictions and traces (calibrated, with the SC-MAKS rows), ``gains``
    dataset -> "later vs earlier" -> hop -> paired gain, ``maps`` system name -> calibration map,
    ``notes`` the report's lines, ``reward_points`` the training curves' points (:func:`reward_points`),
    ``abstain`` the NOT ENOUGH INFO rules the predictions were decided with."""

    result: runner.EvalResult
    gains: dict
    maps: dict
    notes: list[str]
    reward_points: list[dict] = field(default_factory=list)
    abstain: AbstainParams = field(default_factory=AbstainParams)


def run_evaluate(params: EvaluateParams, params_file: str | Path = "params.yaml", *, real_only: bool = False,
                 llm_loader: Callable[[str], Any] | None = None, abstain: AbstainParams | None = None) -> EvaluateRun:
    """Evaluate ``sets`` (plus ``real_sets`` when ``real`` is on), or with ``real_only`` the
    ``real_sets`` alone (``make eval-real``, with the maps the stage saved); ``llm_loader`` (model spec
    -> LLM) replaces :func:`factrl.eval.systems.load_llm` (tests). ``abstain``: when a HARIS verdict
    becomes NOT ENOUGH INFO (default: params ``abstain`` of ``params_file``). Writes only the
    calibration maps."""
    abstain = abstain if abstain is not None else load_abstain_params(params_file)
    sets, skipped = load_sets(params, real_only=real_only)
    if not sets:
        raise FileNotFoundError("evaluate: no eval set to run" + (f" ({'; '.join(skipped)})" if skipped else ""))
    checkpoints = resolve_checkpoints(params, params_file)
    base_model = resolve_model(params.base_model, None, where="evaluate.base_model", params_file=params_file)
    device = resolve_device(params.device, key="evaluate.device")
    loader = llm_loader or functools.partial(load_llm, device=device, precision=params.precision)
    systems = build_systems(params.systems, checkpoints, base_model, load_llm=loader, top_k=params.top_k,
                            max_new_tokens=params.max_new_tokens, max_turns=params.max_turns)
    calibration = calibration_inputs(params, sets, systems, checkpoints) if not real_only else None
    # side by side on the CPU (evaluate.workers); a GPU decodes in this process
    started = time.perf_counter()
    run = workers.prefetch(planned_runs(params, sets, systems, calibration),
                           params.workers if device.type == "cpu" else 1, loader)
    # fitted before the evaluation, on dev claims only; the real sets (make eval-real) reuse the maps
    from factrl.eval.calibration import CALIBRATION_DIR

    maps, calibration_notes = calibrate(params, calibration, checkpoints, CALIBRATION_DIR, run=run) \
        if not real_only else (_saved_maps(checkpoints), [])
    result = runner.evaluate(sets, systems, per_hop=params.per_hop, seed=params.seed, batch_size=params.batch_size,
                             n_boot=params.n_boot, trace_claims=params.trace_claims, run=run)
    wall = time.perf_counter() - started
    if params.calibration.enabled:
        calibration_run.apply_calibration(result, maps)
    # NOT ENOUGH INFO where a run's citations do not bear on its claim, on the calibrated confidence
    apply_abstention(result.predictions, abstain)
    result.rows += abstention_rows(result.predictions)
    # SC-MAKS, majority vote, uniform vote, best single member: stage fit_consensus's eval-split verdicts
    result.rows += consensus_rows(CONSENSUS_PREDICTIONS, n_boot=params.n_boot, seed=params.seed)
    notes = [
        f"eval sets: {', '.join(s.name for s in sets)}" + (f" (skipped: {'; '.join(skipped)})" if skipped else ""),
        f"sample: up to {params.per_hop or 'all'} claims per hop, balanced labels, seed {params.seed}; "
        f"bootstrap {params.n_boot} resamples",
        "HARIS checkpoints: " + ", ".join(f"{n} = {r} / {s}" for n, r, s in checkpoints),
        f"baselines on {base_model}; top-{params.top_k} retrieval ({params.retrieval_mode} over index/, "
        "BM25 over a set's own passages, or over a set's own index as over index/); "
        f"{params.max_new_tokens} new tokens per turn, up to {params.max_turns} questions / searches",
        f"local models on {device} in {resolve_precision(params.precision, device)} "
        f"(precision: {params.precision})",
        # with workers the runs overlap: their seconds add up to more than the wall time
        f"wall time: {wall:.0f} s (calibration and evaluation; the evaluation's runs: "
        f"{sum(result.seconds.values()):.0f} s" + (" in worker processes)" if isinstance(run, workers.Prefetched)
                                                  else ")"),
        *calibration_notes,
        "abstention (NOT ENOUGH INFO): " + ", ".join(f"{k} {v}" for k, v in abstain.rules().items()),
    ]
    # what each HARIS checkpoint adds to the one before it (base -> warm -> trained), paired over
    # the same claims: the figure that shows what a stage of training did
    names = [n for n, _, _ in checkpoints]
    gains = runner.paired_gains(result.predictions, list(zip(names[1:], names[:-1])), n_boot=params.n_boot,
                                seed=params.seed)
    for dataset, by_pair in gains.items():
        for pair, cells in by_pair.items():
            pooled = cells["pooled"]
            notes.append(f"{dataset}: {pair}, paired over the same {pooled['n']} claims: "
                         f"{100 * pooled['mean']:+.1f} points [{100 * pooled['ci95'][0]:+.1f}, "
                         f"{100 * pooled['ci95'][1]:+.1f}]")
    return EvaluateRun(result, gains, maps, notes, reward_points(), abstain)


def _saved_maps(checkpoints: list) -> dict:
    """The maps the stage saved for these checkpoints (``make eval-real`` applies them)."""
    from factrl.eval.calibration import Calibrator, calibration_path

    paths = {name: calibration_path(name) for name, _, _ in checkpoints}
    return {name: Calibrator.load(p) for name, p in paths.items() if p.exists()}
