"""SC-MAKS (Sawkar, 2025) as two pipeline stages: ``debate`` and ``fit_consensus``.

``debate``: the pool of params ``debate.pool`` (each member on its own backend, behind a call counter
and the on-disk LLM cache) answers and debates the claims of ``debate.splits`` in batches fanned out
by :mod:`factrl.orchestration.debate` (:func:`run_debate`). Output: the transcripts (DEBATE_TURNS) and a summary
(format failures, calls and time per phase and member, agreement, wall time, peak memory).

``fit_consensus``: transcripts -> features (:mod:`factrl.consensus.features`) -> reward model
(:mod:`factrl.consensus.reward_model`) -> PPO aggregator (:mod:`factrl.consensus.aggregator`) ->
weighted vote (:func:`fit_consensus`). The pipeline's fit trains on the ``train`` claims, stops
early on ``dev`` and scores ``eval``; the paper's protocol (:func:`cross_validate`) repeats the fit
on folds x seeds of 70/15/15 splits of all debated claims, stratified by label, and reports mean,
std, 95% interval and paired tests per system: ``scmaks`` (learned weights over the final stances),
``majority_vote`` (the opening answers, no debate), ``uniform_vote`` (the final stances, w = 1/n) and
``best_single`` (the opening answers of the member most accurate on the fit's train + validation).

Ablations (:func:`debate_plan`, :func:`consensus_plan`) each change one field of a plan; a wrong
name in params stops the stage with a :class:`~factrl.config.ConfigError` naming the key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from factrl.agents import debate as debate_lib
from factrl.agents.systems_registry import system_names
from factrl.config import ConfigError
from factrl.consensus import aggregator as agg_lib
from factrl.consensus.features import HISTORY, FeatureSet, debate_features, feature_table
from factrl.consensus.params import FitConsensusParams
from factrl.consensus.reward_model import RewardModel, auc, fit_reward_model, model_inputs
from factrl.data.schemas import CONSENSUS_PREDICTIONS, DEBATE_TURNS, validate
from factrl.data.splits import cv_splits
from factrl.eval.stats import agreement_rate, paired_tests, run_metrics, summary
from factrl.hardware import peak_rss_mib
from factrl.llm.backends import BACKENDS, open_llm
from factrl.llm.cache import CachedLLM, DiskCache, endpoint_cache_name
from factrl.llm.counting import CountingLLM
from factrl.model_names import resolve_model
from factrl.recipes.scmaks_params import DebateParams, MemberParams
from factrl.rewards import maporl
from factrl.rewards.registry import RewardKind, choose_reward

SYSTEMS = ("scmaks", "majority_vote", "uniform_vote", "best_single")
SPLITS = ("train", "dev", "eval")  # the pipeline fit: fit on train, stop early on dev, score eval


# --------------------------------------------------------------------------------------------
# plans: what the params (with their ablations) make the run do
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DebatePlan:
    """The debate a params section asks for: each round's role and each member's spec."""

    roles: tuple[str, ...]
    pool: tuple[MemberParams, ...]


@dataclass(frozen=True)
class ConsensusPlan:
    """The consensus a params section asks for: ``learned`` or ``uniform`` weights, PPO or not."""

    weights: str
    ppo: bool


def _check_names(values: Sequence[str], known, key: str, what: str) -> None:
    for i, v in enumerate(values):
        if v not in known:
            raise ConfigError(f"{key}[{i}]: unknown {what} {v!r}; known: {sorted(known)}")


def debate_plan(p: DebateParams, where: str = "params.yaml:debate") -> DebatePlan:
    """Validate the ``debate`` section and apply its ablations (errors name the key)."""
    if not p.pool:
        raise ConfigError(f"{where}.pool: the pool needs at least one member")
    names = [m.name for m in p.pool]
    for i, m in enumerate(p.pool):
        if not m.name.strip() or names.index(m.name) != i:
            raise ConfigError(f"{where}.pool[{i}].name: {m.name!r} is empty or not unique")
        if m.system not in system_names():
            raise ConfigError(f"{where}.pool[{i}].system: unknown member system {m.system!r}; "
                              f"known: {sorted(system_names())}")
        if m.backend not in BACKENDS:
            raise ConfigError(f"{where}.pool[{i}].backend: unknown backend {m.backend!r}; known: {list(BACKENDS)}")
    for j, a in enumerate(p.ablations):
        if a in agg_lib.ABLATIONS:
            raise ConfigError(f"{where}.ablations[{j}]: {a!r} is a consensus ablation: "
                              "set it in fit_consensus.ablations")
    _check_names(p.ablations, debate_lib.ABLATIONS, f"{where}.ablations", "debate ablation")
    for key in ("fixed_member", "summarizer_member"):
        if getattr(p, key) and getattr(p, key) not in names:
            raise ConfigError(f"{where}.{key}: unknown member {getattr(p, key)!r}; the pool has {names}")
    if p.summarizer not in debate_lib.SUMMARIZERS:
        raise ConfigError(f"{where}.summarizer: unknown summarizer {p.summarizer!r}; "
                          f"known: {sorted(debate_lib.SUMMARIZERS)}")
    _check_names(p.splits, SPLITS, f"{where}.splits", "split")
    for key in ("samples", "batch_size", "concurrency", "evidence_k", "debate_max_tokens"):
        if getattr(p, key) < 1:
            raise ConfigError(f"{where}.{key}: must be >= 1, got {getattr(p, key)}")
    if p.rounds < 0:
        raise ConfigError(f"{where}.rounds: must be >= 0, got {p.rounds}")
    if p.verifier_reward:
        try:
            choose_reward(p.verifier_reward, RewardKind.VERIFIER_SHAPE, maporl.REWARDS)
        except KeyError as exc:
            raise ConfigError(f"{where}.verifier_reward: {exc} (empty = off)") from None
    try:
        roles = debate_lib.role_schedule(p.rounds, p.first_role, p.ablations)
    except ValueError as exc:
        raise ConfigError(f"{where}.ablations: {exc}") from None
    pool = tuple(p.pool)
    if "fixed_agent" in p.ablations:
        fixed = next(m for m in pool if m.name == (p.fixed_member or pool[0].name))
        same = {k: getattr(fixed, k) for k in ("system", "model", "search_model", "backend", "base_url", "api_key_env")}
        pool = tuple(dataclasses.replace(m, **same) for m in pool)
    return DebatePlan(roles, pool)


def consensus_plan(p: FitConsensusParams, where: str = "params.yaml:fit_consensus") -> ConsensusPlan:
    """Validate the ``fit_consensus`` section and read its ablations (errors name the key)."""
    for j, a in enumerate(p.ablations):
        if a in debate_lib.ABLATIONS:
            raise ConfigError(f"{where}.ablations[{j}]: {a!r} is a debate ablation: set it in debate.ablations")
    _check_names(p.ablations, agg_lib.ABLATIONS, f"{where}.ablations", "consensus ablation")
    try:
        cv_splits([], p.cv.folds, (), p.cv.fractions)
    except ValueError as exc:
        raise ConfigError(f"{where}.cv: {exc}") from None
    return ConsensusPlan("uniform" if "uniform_vote" in p.ablations else "learned", "no_rlhf" not in p.ablations)


# --------------------------------------------------------------------------------------------
# the pool at run time
# --------------------------------------------------------------------------------------------


@dataclass
class Pool:
    """The members with their (cached, counted) backends; members sharing a model share one backend."""

    members: list[debate_lib.Member]
    counters: list[CountingLLM]
    cached: list[CachedLLM]
    summarizer_llm: Any

    def calls(self) -> int:
        """Backend calls made so far (cache hits excluded)."""
        return sum(c.calls for c in self.counters)

    @property
    def in_process(self) -> bool:
        return any(getattr(c.inner, "submit", None) is not None for c in self.counters)


Loader = Callable[[str, MemberParams], Any]  # (model, member spec) -> a context manager of an LLM


def cache_name(model: str, spec: MemberParams) -> str:
    """The name a model's calls are cached under: a model directory by its content (training
    rewrites it in place), an endpoint's model by its URL."""
    return endpoint_cache_name(model, spec.base_url)


@contextlib.contextmanager
def open_pool(pool: Sequence[MemberParams], *, precision: str = "auto", summarizer_member: str = "",
              cache: DiskCache | None = None, loader: Loader | None = None) -> Iterator[Pool]:
    """Open every member's backend(s) for the block: each distinct (model, backend, endpoint) once,
    wrapped as ``CachedLLM(CountingLLM(backend))``. ``loader`` replaces :func:`factrl.llm.backends.open_llm`
    (tests pass fakes)."""
    cache = cache if cache is not None else DiskCache()

    def default_loader(model: str, spec: MemberParams):
        return open_llm(model, spec.backend, precision=precision, base_url=spec.base_url,
                        api_key_env=spec.api_key_env)

    load = loader or default_loader
    with contextlib.ExitStack() as stack:
        opened: dict[tuple, CachedLLM] = {}
        counters: list[CountingLLM] = []

        def backend(model: str, spec: MemberParams) -> CachedLLM:
            key = (model, spec.backend, spec.base_url, spec.api_key_env)
            if key not in opened:
                counting = CountingLLM(stack.enter_context(load(model, spec)))
                counters.append(counting)
                opened[key] = CachedLLM(counting, cache, key_name=cache_name(model, spec))
            return opened[key]

        members = []
        for spec in pool:
            llm = backend(spec.model, spec)
            search = backend(spec.search_model, spec) if spec.system == "haris" and spec.search_model else None
            members.append(debate_lib.Member(spec.name, spec.system, llm, spec.model, search, spec.persona,
                                             spec.temperature, spec.seed))
        by_name = {m.name: m for m in members}
        summarizer = by_name.get(summarizer_member, members[0]).llm
        yield Pool(members, counters, list(opened.values()), summarizer)


# --------------------------------------------------------------------------------------------
# stage debate
# --------------------------------------------------------------------------------------------


def claim_records(claims_by_split: dict[str, pa.Table]) -> list[dict]:
    """The debated claims (CLAIMS tables per split) as ``{id, claim, split, label, num_hops}``."""
    return [{"id": str(r["id"]), "claim": r["claim"], "split": split, "label": r["label"], "num_hops": r["num_hops"]}
            for split, table in claims_by_split.items()
            for r in table.select(["id", "claim", "label", "num_hops"]).to_pylist()]


def resolve_pool(params: DebateParams, params_file: str | Path = "params.yaml") -> DebateParams:
    """``params`` with every member's symbolic model names (``base``, ``warm``, ``last``, ``r<id>``)
    resolved by :func:`factrl.model_names.resolve_model`: ``model`` as the reasoning agent, ``search_model``
    (empty: ``model``'s name, for a ``haris`` member) as the search agent."""
    pool = []
    for i, m in enumerate(params.pool):
        api = m.backend == "openai"  # an endpoint's model: any name is the endpoint's to judge
        search = m.search_model or (m.model if m.system == "haris" else "")
        model = resolve_model(m.model, "reason", where=f"debate.pool[{i}].model", params_file=params_file, api=api)
        if search:
            search = resolve_model(search, "search", where=f"debate.pool[{i}].search_model",
                                   params_file=params_file, api=api)
        pool.append(dataclasses.replace(m, model=model, search_model=search))
    return dataclasses.replace(params, pool=tuple(pool))


def debate(claims_by_split: dict[str, pa.Table], params: DebateParams, *, retriever, work_dir: Path,
           loader: Loader | None = None, cache: DiskCache | None = None) -> tuple[pa.Table, dict]:
    """Stage ``debate``'s run: the transcripts and summary of the debate ``params`` plan (ablations
    applied; members' model names resolved, :func:`resolve_pool`) over the claims."""
    plan = debate_plan(params)
    with open_pool(plan.pool, precision=params.precision, summarizer_member=params.summarizer_member,
                   cache=cache, loader=loader) as pool:
        return run_debate(claims_by_split, pool, retriever, params, plan, work_dir=work_dir)

def batch_key(plan: DebatePlan, params: DebateParams, batch: Sequence[dict]) -> str:
    """What a batch's transcript depends on: the plan (with each model's content), every setting
    that shapes a turn, and the claims."""
    settings = {k: v for k, v in dataclasses.asdict(params).items()
                if k not in ("pool", "ablations", "splits", "max_claims", "batch_size", "concurrency", "retries")}
    models = sorted({cache_name(m, spec) for spec in plan.pool for m in (spec.model, spec.search_model) if m})
    blob = json.dumps({"roles": plan.roles, "pool": [dataclasses.asdict(m) for m in plan.pool], "models": models,
                       "settings": settings, "claims": [[c["id"], c["claim"]] for c in batch]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def run_debate(claims_by_split: dict[str, pa.Table], pool: Pool, retriever, params: DebateParams, plan: DebatePlan,
               *, work_dir: Path) -> tuple[pa.Table, dict]:
    """Debate every claim (batches fanned out by :mod:`factrl.orchestration.debate`, resumable in ``work_dir``);
    returns the transcripts (DEBATE_TURNS) and the run's summary."""
    from factrl.orchestration.debate import run_debate_batches

    t0, calls0, hits0 = time.perf_counter(), pool.calls(), sum(c.hits for c in pool.cached)
    records = claim_records(claims_by_split)
    meta = {r["id"]: {k: r[k] for k in ("split", "label", "num_hops")} for r in records}
    batches = [records[i : i + params.batch_size] for i in range(0, len(records), params.batch_size)]
    keys = [batch_key(plan, params, b) for b in batches]

    def work(index: int, batch: list[dict]) -> dict:
        run = debate_lib.Debate(pool.members, retriever, params, plan.roles, summarizer_llm=pool.summarizer_llm,
                                calls=pool.calls)
        states = run.run(batch, checkpoint_dir=work_dir / keys[index])
        return {"rows": debate_lib.transcript_rows(states, pool.members, meta.__getitem__), "costs": run.costs}

    # in-process models share the CPU (and are not thread-safe): their batches run one at a time
    concurrency = 1 if pool.in_process else params.concurrency
    done = run_debate_batches(batches, work, [work_dir / f"{k}.json" for k in keys], concurrency=concurrency,
                              retries=params.retries) if batches else []
    table = validate(pa.Table.from_pylist([r for rec in done for r in rec["rows"]], schema=DEBATE_TURNS),
                     DEBATE_TURNS, "debate transcripts")
    info = debate_summary(table, done, plan, params)
    info |= {"calls": {"backend": pool.calls() - calls0, "cache_hits": sum(c.hits for c in pool.cached) - hits0},
             "batches": len(done), "batches_resumed": sum(bool(r.get("resumed")) for r in done),
             "wall_seconds": time.perf_counter() - t0, "peak_rss_mib": peak_rss_mib()}
    return table, info


def _costs(records: Sequence[dict]) -> dict:
    """Calls and seconds per phase (and per member in the generation phase), summed over batches."""
    out: dict = {}
    for rec in records:
        for phase, cost in rec["costs"].items():
            cell = out.setdefault(phase, {"calls": 0, "seconds": 0.0})
            cell["calls"] += cost["calls"]
            cell["seconds"] += cost["seconds"]
            for member, mc in cost.get("members", {}).items():
                m = cell.setdefault("members", {}).setdefault(member, {"calls": 0, "seconds": 0.0})
                m["calls"] += mc["calls"]
                m["seconds"] += mc["seconds"]
    return out


def debate_summary(table: pa.Table, records: Sequence[dict], plan: DebatePlan, params: DebateParams) -> dict:
    """Counts and rates of a debate run: claims, format failures, summaries, accuracy, agreement, costs."""
    rows = table.to_pylist()
    answers = [r for r in rows if r["phase"] != debate_lib.SUMMARY]
    failures: dict = {"total": sum(not r["format_valid"] for r in answers), "answers": len(answers)}
    failures["rate"] = failures["total"] / max(len(answers), 1)
    for key in ("member", "phase"):
        failures[f"by_{key}"] = {}
        for r in answers:
            failures[f"by_{key}"].setdefault(r[key], 0)
            failures[f"by_{key}"][r[key]] += not r["format_valid"]
    out = {"claims": {}, "roles": list(plan.roles), "ablations": list(params.ablations),
           "members": [dataclasses.asdict(m) for m in plan.pool], "format_failures": failures,
           "summaries": sum(r["phase"] == debate_lib.SUMMARY for r in rows), "costs": _costs(records)}
    for r in rows:
        if r["phase"] == debate_lib.GENERATE and r["member"] == plan.pool[0].name:
            out["claims"][r["split"]] = out["claims"].get(r["split"], 0) + 1
    if rows:
        fs = debate_features(table)
        every = range(len(fs))
        out["accuracy"] = {m: {"opening": float(o), "final": float(f)} for m, o, f in
                           zip(fs.members, fs.member_accuracy(every, "opening"), fs.member_accuracy(every))}
        out["agreement"] = {"opening": agreement_rate(fs.opening), "final": agreement_rate(fs.stance)}
        if params.verifier_reward:
            out["verifier_reward"] = debate_verifier_rewards(rows, [m.name for m in plan.pool], params)
    return out


def debate_verifier_rewards(rows: Sequence[dict], members: Sequence[str], params: DebateParams) -> dict:
    """MAPoRL's shaped reward (``params.verifier_reward``) of every member's answer at every turn
    (turn 0 = the opening answer, then one per round), per claim: the rule verifier (1 for the gold
    verdict) behind the hacking guards. Returns the mean per member and per turn, and how often a
    guard fired (-10)."""
    from factrl.rewards.haris import binary_label

    turns: dict[str, dict[tuple[int, str], dict]] = {}
    for r in rows:
        if r["phase"] != debate_lib.SUMMARY and r["sample"] == 0:
            turns.setdefault(r["claim_id"], {})[(r["round"], r["member"])] = r
    shaped, guarded = [], 0
    for answers in turns.values():
        rounds = sorted({t for t, _ in answers})
        if any((t, m) not in answers for t in rounds for m in members):
            continue  # a claim with a missing answer (never in a finished run) cannot be shaped
        grid = [[answers[(t, m)] for m in members] for t in rounds]
        verifier = [[float(a["verdict"] is not None and a["label"] is not None
                           and a["verdict"] == binary_label(a["label"])) for a in row] for row in grid]
        texts = [[a["text"] or "" for a in row] for row in grid]
        r = maporl.verifier_rewards(params.verifier_reward, verifier, texts, gamma=params.verifier_gamma,
                                    min_tokens=params.verifier_min_tokens)
        guarded += int(sum(maporl.penalized_score(1.0, x, min_tokens=params.verifier_min_tokens) == maporl.PENALTY
                           for row in texts for x in row))
        shaped.append(r)
    if not shaped:
        return {"shape": params.verifier_reward, "claims": 0}
    width = min(len(r) for r in shaped)
    stack = np.stack([r[:width] for r in shaped])  # [claims, T, A]
    return {"shape": params.verifier_reward, "gamma": params.verifier_gamma, "claims": len(shaped),
            "per_member": {m: float(stack[:, :, a].mean()) for a, m in enumerate(members)},
            "per_turn": [float(x) for x in stack.mean(axis=(0, 2))],
            "guarded_answers": guarded, "answers": int(sum(r.size for r in shaped))}


# --------------------------------------------------------------------------------------------
# stage fit_consensus
# --------------------------------------------------------------------------------------------


@dataclass
class Fit:
    """One consensus fit: the features (historical accuracy from its training claims), the reward
    model, the aggregator, and the best single member (by opening accuracy on train + validation)."""

    features: FeatureSet
    reward_model: RewardModel
    aggregator: agg_lib.Aggregator
    best_member: int


def fit_run(fs: FeatureSet, train: Sequence[int], val: Sequence[int], params: FitConsensusParams,
            seed: int | None = None) -> Fit:
    """Fit the reward model and the aggregator on claims ``train`` (early stopping on ``val``)."""
    if not train:
        raise ValueError("a consensus fit needs training claims")
    seed = params.seed if seed is None else seed
    fs = fs.with_history(train)
    rm = fit_reward_model(fs.subset(train), fs.subset(val), params.reward_model, seed)
    x, rewards = model_inputs(fs, rm.scaler), rm.score(fs)
    train, val = list(train), list(val)
    aggregator = agg_lib.fit_aggregator(x[train], rewards[train], x[val], rewards[val], fs.x[0, :, HISTORY],
                                        fs.members, params.aggregator, seed=seed, ablations=params.ablations)
    best = int(np.argmax(fs.member_accuracy(train + val, "opening")))
    return Fit(fs, rm, aggregator, best)


def predict(fit: Fit, idx: Sequence[int]) -> tuple[dict[str, list[str | None]], np.ndarray]:
    """Every system's verdicts on claims ``idx`` and the aggregator's weights ``[len(idx), n]``."""
    fs = fit.features.subset(idx)
    weights = fit.aggregator.weights(model_inputs(fs, fit.reward_model.scaler))
    uniform = np.full(weights.shape, 1.0 / max(weights.shape[1], 1))
    verdicts = {
        "scmaks": agg_lib.weighted_vote(fs.stance, weights),
        "majority_vote": agg_lib.weighted_vote(fs.opening, uniform),
        "uniform_vote": agg_lib.weighted_vote(fs.stance, uniform),
        "best_single": [row[fit.best_member] for row in fs.opening],
    }
    return verdicts, weights


def system_metrics(fit: Fit, idx: Sequence[int], verdicts: dict[str, list[str | None]]
                   ) -> dict[str, dict[str, float]]:
    """:func:`factrl.eval.stats.run_metrics` of every system's ``verdicts`` (:func:`predict`) on
    claims ``idx`` (CAAR over the stances each system votes on; none for the single member)."""
    fs = fit.features.subset(idx)
    stances = {"scmaks": fs.stance, "majority_vote": fs.opening, "uniform_vote": fs.stance, "best_single": None}
    return {s: run_metrics(fs.labels, verdicts[s], stances[s]) for s in SYSTEMS}


def mean_weights(members: Sequence[str], weights: np.ndarray) -> dict[str, float]:
    """Each member's aggregator weight ``[claims, members]`` averaged over the claims."""
    return dict(zip(members, map(float, weights.mean(axis=0))))


def cross_validate(fs: FeatureSet, params: FitConsensusParams) -> dict:
    """The paper's protocol over all claims of ``fs``: folds x seeds of stratified 70/15/15 runs; per
    system and metric mean / std / 95% interval; SC-MAKS against each baseline, paired over runs."""
    runs = []
    for seed, fold, train, val, test in cv_splits(fs.labels, params.cv.folds, params.cv.seeds, params.cv.fractions):
        if not test or not train:
            continue
        fit = fit_run(fs, train, val, params, seed=params.seed + 1000 * seed + fold)
        verdicts, weights = predict(fit, test)
        runs.append({"seed": seed, "fold": fold, "n_test": len(test),
                     "metrics": system_metrics(fit, test, verdicts),
                     "best_member": fs.members[fit.best_member],
                     "weights_mean": mean_weights(fs.members, weights)})
    out: dict = {"runs": len(runs), "per_run": runs, "systems": {}, "tests": {}}
    if not runs:
        return out
    # does the aggregator find the strongest member? its mean weight per member over the runs
    out["weights_mean"] = {m: float(np.mean([r["weights_mean"][m] for r in runs])) for m in fs.members}
    for system in SYSTEMS:
        names = runs[0]["metrics"][system]
        out["systems"][system] = {m: summary([r["metrics"][system][m] for r in runs]) for m in names}
    if len(runs) >= 2:
        for other in SYSTEMS[1:]:
            out["tests"][other] = {m: paired_tests([r["metrics"]["scmaks"][m] for r in runs],
                                                   [r["metrics"][other][m] for r in runs])
                                   for m in ("accuracy", "f1_weighted")}
    return out


@dataclass
class ConsensusResult:
    """Everything stage fit_consensus writes."""

    features: pa.Table
    predictions: pa.Table
    fit: Fit
    metrics: dict


def fit_consensus(turns: pa.Table, params: FitConsensusParams) -> ConsensusResult:
    """The pipeline's fit (train -> dev early stopping -> eval predictions) and the cross-validation."""
    plan = consensus_plan(params)
    fs = debate_features(turns)
    train, val, test = (fs.split_indices(s) for s in SPLITS)
    if not train:
        raise ValueError("fit_consensus: the transcripts hold no claim of split 'train' (see debate.splits)")
    fit = fit_run(fs, train, val, params)
    verdicts, weights = predict(fit, test)
    rows = []
    for k, c in enumerate(test):
        for system in SYSTEMS:
            w = list(zip(fs.members, map(float, weights[k]))) if system == "scmaks" else None
            rows.append({"claim_id": fs.claim_ids[c], "label": fs.labels[c], "num_hops": fs.num_hops[c],
                         "system": system, "verdict": verdicts[system][k], "weights": w})
    predictions = pa.Table.from_pylist(rows, schema=CONSENSUS_PREDICTIONS)
    rm_history, agg_history = fit.reward_model.history, fit.aggregator.history
    metrics = {
        "plan": dataclasses.asdict(plan), "ablations": list(params.ablations), "members": fs.members,
        "claims": {s: len(fs.split_indices(s)) for s in SPLITS},
        "best_single": fs.members[fit.best_member],
        "test": system_metrics(fit, test, verdicts) if test else {},
        "member_accuracy": {m: {"opening": float(o), "final": float(f)} for m, o, f in
                            zip(fs.members, fs.member_accuracy(test, "opening"), fs.member_accuracy(test))},
        "weights_mean": mean_weights(fs.members, weights) if test else {},
        "reward_model": {"best_epoch": rm_history.best_epoch, "epochs": len(rm_history.val_loss),
                         "val_auc": auc(fit.reward_model.score(fit.features.subset(val)).reshape(-1),
                                        fit.features.subset(val).correct.reshape(-1)) if val else None},
        "aggregator": {"best_iteration": agg_history.best_iteration, "iterations": len(agg_history.val_reward),
                       "val_reward": max(agg_history.val_reward) if agg_history.val_reward else None},
        "cv": cross_validate(fs, params),
    }
    return ConsensusResult(feature_table(fit.features), predictions, fit, metrics)

