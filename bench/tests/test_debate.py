"""bench/debate.py's pieces that do not run models: the pool it debates with, the ablation entries,
and the report's keys (the ones the SC-MAKS issue names)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from bench import debate as bench
from bench._measured import Measurement
from factrl.consensus.params import FitConsensusParams
from factrl.recipes.scmaks_params import DebateParams, MemberParams


def test_members_without_their_model_directory_fall_back_to_smollm2(tmp_path):
    trained = tmp_path / "models" / "reason_1"
    trained.mkdir(parents=True)
    pool = (MemberParams(name="Ada", system="haris", model=str(trained), search_model=str(tmp_path / "gone")),
            MemberParams(name="Ben", system="rag", model="smollm2-135m"))
    params, notes = bench.embedded_pool(DebateParams(pool=pool))
    ada, ben = params.pool
    assert ada.model == str(trained) and ada.search_model == "smollm2-135m"  # only the missing one moves
    assert ben.model == "smollm2-135m"
    assert notes == [f"Ada: {tmp_path / 'gone'} missing -> smollm2-135m"]


def test_the_pool_resolves_symbolic_names_as_the_stage_does(tmp_path, monkeypatch):
    """`last` in params debate.pool is the last round's checkpoint, never a model literally named so;
    with --embedded only a checkpoint that is not there falls back to SmolLM2."""
    monkeypatch.chdir(tmp_path)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({
        "model": {"base": "smollm2-135m"}, "rounds": {"1": {"prev": 0, "segment": "all"}},
        "debate": {"pool": [{"name": "Ada", "system": "haris", "model": "last"},
                            {"name": "Ben", "system": "rag", "model": "base"}]}}))
    (tmp_path / "models" / "reason_1").mkdir(parents=True)
    pool, notes = bench.load_pool(params, embedded=False)
    ada, ben = pool.pool
    assert (ada.model, ada.search_model, ben.model) == (
        str(Path("models/reason_1")), str(Path("models/search_1")), "smollm2-135m")
    assert notes == []
    pool, notes = bench.load_pool(params, embedded=True)
    assert (pool.pool[0].model, pool.pool[0].search_model) == (str(Path("models/reason_1")), "smollm2-135m")
    assert notes == [f"Ada: {Path('models/search_1')} missing -> smollm2-135m"]


def _cv(values: list[float]) -> dict:
    mean = sum(values) / len(values)
    return {"systems": {"scmaks": {"accuracy": {"mean": mean}, "f1_weighted": {"mean": mean}}},
            "per_run": [{"metrics": {"scmaks": {"accuracy": v, "f1_weighted": v}}} for v in values]}


def test_an_ablation_is_paired_with_the_full_system_run_by_run():
    full = {"accuracy": [0.8, 0.9, 0.85, 0.8], "f1_weighted": [0.8, 0.9, 0.85, 0.8]}
    entry = bench.ablation_entry(_cv([0.6, 0.7, 0.65, 0.62]), full)
    assert entry["accuracy"] == {"mean": pytest.approx(0.6425)}
    assert entry["vs_full_accuracy"] is not None and entry["vs_full_f1"] is not None
    assert bench.ablation_entry(_cv([0.6]), full)["vs_full_accuracy"] is None  # nothing to pair


def test_report_writes_the_issues_keys(tmp_path):
    cell = {"mean": 0.7, "std": 0.05, "ci95": [0.6, 0.8]}
    demo = {"accuracy": {s: cell for s in bench.scmaks.SYSTEMS}, "f1": {s: cell for s in bench.scmaks.SYSTEMS},
            "latency_vs_single": 2.1, "calls_vs_single": 3.0, "ablations": {"no_coop": {"accuracy": cell}}}
    args = argparse.Namespace(claims=60, params="params.yaml", smoke=False, datasets=("demo", "truthfulqa"))
    out = tmp_path / "debate.json"
    bench.report({"demo": demo}, DebateParams(), FitConsensusParams(), args, [], out, Measurement(), complete=True)
    written = json.loads(out.read_text())
    assert {"accuracy", "latency_vs_single", "calls_vs_single", "ablations", "commit", "measured"} <= set(written)
    assert set(written["accuracy"]) == {"scmaks", "majority_vote", "uniform_vote", "best_single"}
    assert set(written["accuracy"]["scmaks"]) == {"mean", "std", "ci95"}
    assert written["measured"]["cpu_capability"]
    assert written["dataset"] == "demo" and written["setup"]["datasets"] == ["demo", "truthfulqa"]


def test_datasets_are_named_and_an_unknown_name_is_an_error():
    assert bench.dataset_list("climate_fever, truthfulqa") == ("climate_fever", "truthfulqa")
    with pytest.raises(argparse.ArgumentTypeError, match="'climate'"):
        bench.dataset_list("demo,climate")


def test_the_real_sets_give_binary_claims_and_an_index_of_their_passages(shared_data, tmp_path):
    """Climate-FEVER keeps its SUPPORTS / REFUTES claims (DISPUTED and NEI have no verdict here);
    TruthfulQA, which ships no evidence text, searches the other two sets' sentences (closed-book)."""
    from factrl.retrieval.index import Retriever

    climate, index = bench.shared_set(*bench.SHARED_SETS["climate_fever"], tmp_path / "climate")
    assert set(climate.column("label").to_pylist()) == {"SUPPORTS", "REFUTES"} and climate.num_rows == 591
    assert len(Retriever(index, mode="bm25")) == 5240
    truthful, index = bench.shared_set(*bench.SHARED_SETS["truthfulqa"], tmp_path / "truthfulqa")
    assert truthful.num_rows == 790 and set(truthful.column("label").to_pylist()) == {"SUPPORTS", "REFUTES"}
    assert len(Retriever(index, mode="bm25")) == 5240 + 648
