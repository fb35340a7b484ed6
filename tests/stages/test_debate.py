"""Stages `debate` and `fit_consensus` on a tiny demo world with scripted members.

The fan-out runs for real (Prefect tasks under a test harness, the disk cache, batch and phase
checkpoints); only the models are scripted, so calls can be counted exactly.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from factrl.config import ConfigError, load_section
from factrl.consensus.params import FitConsensusParams
from factrl.data.schemas import CONSENSUS_PREDICTIONS, DEBATE_TURNS
from factrl.eval.stats import consensus_rows
from factrl.llm.cache import DiskCache
from factrl.orchestration.fanout import BatchError
from factrl.recipes import scmaks
from factrl.recipes.scmaks_params import DebateParams, MemberParams
from factrl.testing.prefect_harness import prefect_harness
from stages import debate as stage
from stages import fit_consensus as fit_stage
from tests.debate_fakes import DebateFake, by_label, loader_of


@pytest.fixture(scope="module", autouse=True)
def temporary_prefect_server():
    with prefect_harness():
        yield


POOL = (MemberParams("Ada", "haris", model="right", persona="You are careful."),
        MemberParams("Ben", "single_agent", model="wrong", persona="You are bold.", seed=1),
        MemberParams("Cyd", "rag", model="coin", persona="You are quick.", seed=2))
PARAMS = DebateParams(pool=POOL, retrieval_mode="bm25", top_k=2, evidence_k=2, max_new_tokens=16,
                      debate_max_tokens=48, batch_size=4)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(claims per split, retriever, claim text -> gold label) of a 24-claim demo world."""
    from factrl.data.params import WorldParams
    from factrl.data.world import write_world
    from factrl.retrieval.index import Retriever, build_index

    d = tmp_path_factory.mktemp("world")
    write_world(WorldParams(seed=8, num_passages=200, num_claims=24, hops=(2,)), d / "p.parquet", d / "c.parquet")
    build_index(d / "p.parquet", d / "index", embedder=None)
    claims = pq.read_table(d / "c.parquet")
    splits = {"train": claims.slice(0, 12), "dev": claims.slice(12, 4), "eval": claims.slice(16, 8)}
    labels = dict(zip(claims.column("claim").to_pylist(), claims.column("label").to_pylist()))
    return splits, Retriever(d / "index", mode="bm25"), labels


def fakes(labels, die_after: int | None = None, dies: str = "") -> dict[str, DebateFake]:
    right, wrong = by_label(labels), by_label(labels, wrong=True)

    def coin(claim, kind):
        return (right if len(claim) % 2 else wrong)(claim, kind)

    policies = {"right": right, "wrong": wrong, "coin": coin}
    return {m: DebateFake(p, m, die_after=die_after if m == dies else None) for m, p in policies.items()}


def run(world, tmp_path, served, params=PARAMS, work="work"):
    splits, retriever, _ = world
    return scmaks.debate(splits, params, retriever=retriever, work_dir=tmp_path / work, loader=loader_of(served),
                        cache=DiskCache(tmp_path / work / "cache.sqlite"))


def test_debate_stage_transcripts_and_summary(world, tmp_path):
    served = fakes(world[2])
    table, summary = run(world, tmp_path, served)
    assert table.schema == DEBATE_TURNS
    assert summary["claims"] == {"train": 12, "dev": 4, "eval": 8}
    assert table.num_rows == 24 * 3 * 3  # claims x members x (generation + 2 rounds)
    assert summary["roles"] == ["cooperative", "adversarial"] and summary["format_failures"]["total"] == 0
    assert summary["accuracy"]["Ada"] == {"opening": 1.0, "final": 1.0} and summary["accuracy"]["Ben"]["final"] == 0.0
    assert summary["calls"]["backend"] == sum(len(f.seen) for f in served.values()) == 3 * 24 * 3
    costs = summary["costs"]
    assert costs["generate"]["members"]["Ada"]["calls"] == 24 and costs["round1"]["calls"] == 72
    assert summary["wall_seconds"] > 0 and summary["peak_rss_mib"] > 0


def test_killed_debate_resumes_without_repeating_finished_calls(world, tmp_path):
    reference_fakes = fakes(world[2])
    reference, _ = run(world, tmp_path, reference_fakes, work="ref")

    # Cyd's model dies in round 1 of the third batch, after Ada and Ben answered that round
    dying = fakes(world[2], die_after=30, dies="coin")
    with pytest.raises(BatchError, match="Killed"):
        run(world, tmp_path, dying)
    assert 0 < len(dying["coin"].seen) < len(reference_fakes["coin"].seen)

    fresh = fakes(world[2])
    table, summary = run(world, tmp_path, fresh)
    for model, fake in fresh.items():
        assert not set(dying[model].seen) & set(fake.seen), model  # nothing asked twice
        assert len(dying[model].seen) + len(fake.seen) == len(reference_fakes[model].seen), model  # nothing lost
    assert summary["batches_resumed"] > 0
    assert table.equals(reference)  # the same transcripts as an uninterrupted run

    again = fakes(world[2])
    table2, summary2 = run(world, tmp_path, again)
    assert all(f.seen == [] for f in again.values()) and summary2["calls"]["backend"] == 0 and table2.equals(reference)


# --------------------------------------------------------------------------------------------
# ablations: each switch changes the run as named and nothing else
# --------------------------------------------------------------------------------------------


def _changed(a, b) -> set[str]:
    return {f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)}


def test_each_ablation_changes_one_thing_of_the_plan():
    base = scmaks.debate_plan(PARAMS)
    assert base.roles == ("cooperative", "adversarial") and base.pool == POOL
    for name, roles in (("no_adversary", ("cooperative",) * 2), ("no_coop", ("adversarial",) * 2)):
        plan = scmaks.debate_plan(dataclasses.replace(PARAMS, ablations=(name,)))
        assert _changed(base, plan) == {"roles"} and plan.roles == roles
    fixed = scmaks.debate_plan(dataclasses.replace(PARAMS, ablations=("fixed_agent",)))
    assert _changed(base, fixed) == {"pool"}
    for before, after in zip(base.pool, fixed.pool):
        assert _changed(before, after) <= {"system", "model"}  # persona, temperature, seed, name stay
        assert (after.system, after.model) == ("haris", "right")
    consensus = scmaks.consensus_plan(FitConsensusParams())
    assert consensus == scmaks.ConsensusPlan("learned", True)
    assert _changed(consensus, scmaks.consensus_plan(FitConsensusParams(ablations=("uniform_vote",)))) == {"weights"}
    assert _changed(consensus, scmaks.consensus_plan(FitConsensusParams(ablations=("no_rlhf",)))) == {"ppo"}


def _answers(table: pa.Table, phases) -> list[tuple]:
    return [(r["claim_id"], r["member"], r["verdict"], r["text"]) for r in table.to_pylist() if r["phase"] in phases]


def test_debate_ablations_change_the_run_as_named(world, tmp_path):
    base, _ = run(world, tmp_path, fakes(world[2]))
    phases = lambda t: [r["phase"] for r in t.to_pylist() if r["round"] > 0]  # noqa: E731
    for name, role in (("no_adversary", "cooperative"), ("no_coop", "adversarial")):
        table, summary = run(world, tmp_path, fakes(world[2]), dataclasses.replace(PARAMS, ablations=(name,)))
        assert set(phases(table)) == {role} and summary["roles"] == [role, role]
        assert _answers(table, ("generate",)) == _answers(base, ("generate",))  # the openings are untouched
        assert table.num_rows == base.num_rows
    table, summary = run(world, tmp_path, fakes(world[2]), dataclasses.replace(PARAMS, ablations=("fixed_agent",)))
    assert phases(table) == phases(base)
    assert {(r["system"], r["model"]) for r in table.to_pylist()} == {("haris", "right")}
    assert summary["accuracy"]["Ben"] == {"opening": 1.0, "final": 1.0}  # Ben now runs Ada's model


def synthetic_transcripts(world, tmp_path) -> pa.Table:
    table, _ = run(world, tmp_path, fakes(world[2]), work="fit")
    return table


FAST = FitConsensusParams(cv=dataclasses.replace(FitConsensusParams().cv, folds=2, seeds=(0,)))


def test_consensus_ablations_change_the_fit_as_named(world, tmp_path):
    turns = synthetic_transcripts(world, tmp_path)
    base = scmaks.fit_consensus(turns, FAST)
    uniform = scmaks.fit_consensus(turns, dataclasses.replace(FAST, ablations=("uniform_vote",)))
    frozen = scmaks.fit_consensus(turns, dataclasses.replace(FAST, ablations=("no_rlhf",)))
    for other in (uniform, frozen):  # the debate, its features and the reward model are the same
        assert other.features.equals(base.features)
        scores = other.fit.reward_model.score(other.fit.features)
        assert np.allclose(scores, base.fit.reward_model.score(base.fit.features))
    verdicts = lambda r, s: [x["verdict"] for x in r.predictions.to_pylist() if x["system"] == s]  # noqa: E731
    assert verdicts(uniform, "scmaks") == verdicts(uniform, "uniform_vote")
    weights = [dict(x["weights"]) for x in uniform.predictions.to_pylist() if x["system"] == "scmaks"]
    assert all(w == pytest.approx({"Ada": 1 / 3, "Ben": 1 / 3, "Cyd": 1 / 3}) for w in weights)
    assert frozen.fit.aggregator.history.val_reward == [] and base.fit.aggregator.history.val_reward
    assert frozen.fit.aggregator.history.pretrain_loss == pytest.approx(base.fit.aggregator.history.pretrain_loss)


def test_fit_consensus_stage_outputs_and_evaluate_rows(world, tmp_path, monkeypatch):
    turns = synthetic_transcripts(world, tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "debate").mkdir()
    pq.write_table(turns, tmp_path / "debate" / "transcripts.parquet")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"fit_consensus": {"cv": {"folds": 2, "seeds": [0]}}}))
    metrics = fit_stage.main()
    for name in ("features.parquet", "predictions.parquet", "reward_model.pt", "aggregator.pt", "metrics.json"):
        assert (tmp_path / "consensus" / name).exists(), name
    predictions = pq.read_table(tmp_path / "consensus" / "predictions.parquet")
    assert predictions.schema == CONSENSUS_PREDICTIONS and predictions.num_rows == 8 * 4
    assert metrics["best_single"] == "Ada" and metrics["test"]["best_single"]["accuracy"] == 1.0
    assert metrics["test"]["scmaks"]["accuracy"] >= metrics["test"]["majority_vote"]["accuracy"]
    assert metrics["cv"]["runs"] == 2 and set(metrics["cv"]["systems"]) == set(scmaks.SYSTEMS)
    assert set(metrics["cv"]["tests"]["majority_vote"]["accuracy"]) >= {"t_pvalue", "wilcoxon_pvalue"}
    rows = consensus_rows(tmp_path / "consensus" / "predictions.parquet", n_boot=20, seed=0)
    assert {r["system"] for r in rows} == {"SC-MAKS", "Majority vote", "Uniform vote", "Best single member"}
    assert {r["dataset"] for r in rows} == {"demo_debate"} and all(r["n"] == 8 for r in rows)
    assert consensus_rows(tmp_path / "missing.parquet", n_boot=20, seed=0) == []


# --------------------------------------------------------------------------------------------
# wrong params: the stage stops before any work, naming the key
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("section, edit, key", [
    ("debate", {"pool": [{"name": "Ada", "system": "harris"}]},
     "debate.pool[0].system: unknown member system 'harris'"),
    ("debate", {"pool": [{"name": "Ada", "system": "rag", "backend": "vllm"}]},
     "debate.pool[0].backend: unknown backend"),
    ("debate", {"pool": [{"name": "Ada", "system": "rag"}, {"name": "Ada", "system": "rag"}]}, "debate.pool[1].name"),
    ("debate", {"ablations": ["no_adverse"]}, "debate.ablations[0]: unknown debate ablation 'no_adverse'"),
    ("debate", {"ablations": ["uniform_vote"]}, "debate.ablations[0]: 'uniform_vote' is a consensus ablation"),
    ("debate", {"ablations": ["no_adversary", "no_coop"]}, "debate.ablations: "),
    ("debate", {"fixed_member": "Zed"}, "debate.fixed_member: unknown member 'Zed'"),
    ("debate", {"summarizer": "abstractive"}, "debate.summarizer: unknown summarizer"),
    ("fit_consensus", {"ablations": ["no_rhlf"]}, "fit_consensus.ablations[0]: unknown consensus ablation 'no_rhlf'"),
    ("fit_consensus", {"ablations": ["fixed_agent"]}, "fit_consensus.ablations[0]: 'fixed_agent' is a debate ablation"),
])
def test_wrong_params_stop_the_stage_naming_the_key(tmp_path, monkeypatch, section, edit, key):
    monkeypatch.chdir(tmp_path)
    Path("params.yaml").write_text(yaml.safe_dump({section: edit}))
    main = stage.main if section == "debate" else fit_stage.main
    with pytest.raises(ConfigError) as err:
        main()  # no claims, index or transcripts exist: the check comes first
    assert key in str(err.value)


def test_pool_models_resolve_their_symbolic_names(tmp_path):
    """Members name models as the rest of params do (factrl.model_names.resolve_model): `model` as the
    reasoning agent, `search_model` (empty: `model`'s name, for haris) as the search agent."""
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump({"model": {"base": "smollm2-135m"}, "rounds": {
        "1": {"prev": 0, "segment": "all"}, "2": {"prev": 1, "segment": "seg1"}}}))
    pool = (MemberParams("Ada", "haris", model="last"),
            MemberParams("Ben", "haris", model="warm", search_model="r1"),
            MemberParams("Cyd", "rag"),
            MemberParams("Dee", "rag", model="gpt-4o-mini", backend="openai"))
    resolved = scmaks.resolve_pool(DebateParams(pool=pool), params_file).pool
    assert [(m.model, m.search_model) for m in resolved] == [
        (str(Path("models/reason_2")), str(Path("models/search_2"))),
        (str(Path("models/reason_0")), str(Path("models/search_1"))),
        ("smollm2-135m", ""), ("gpt-4o-mini", "")]
    bad = DebateParams(pool=(pool[0], dataclasses.replace(pool[1], search_model="r7")))
    with pytest.raises(ConfigError, match=r"debate.pool\[1\].search_model: 'r7': round 7 is not in params rounds"):
        scmaks.resolve_pool(bad, params_file)


def test_params_yaml_sections_load(repo_root):
    debate_params = scmaks.resolve_pool(load_section(DebateParams, repo_root / "params.yaml"), repo_root / "params.yaml")
    assert debate_params.pool[0].model.startswith("models")  # Ada: the last round's trained pair
    plan = scmaks.debate_plan(debate_params)
    assert len(plan.pool) >= 2 and plan.roles[:2] == ("cooperative", "adversarial")
    assert scmaks.consensus_plan(load_section(FitConsensusParams, repo_root / "params.yaml")).ppo
