"""Stage `evaluate` (and its recipe, `factrl.recipes.evaluate`) and `factrl evaluate`: metrics, the
Table 1 report, plots and traces get written; an edit to an `evaluate` param reruns only that stage."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from factrl.config import ConfigError, load_section
from factrl.data.params import PrepareParams
from factrl.eval import cli, report
from factrl.eval.params import EvaluateParams
from factrl.eval.systems import load_llm
from factrl.recipes import evaluate as recipe
from factrl.testing.pipeline_repo import edit_params, make_pipeline_repo
from stages import evaluate as stage
from tests.eval.test_runner import ScriptedLLM

TINY_WORLD = {"source": "world", "world": {"num_passages": 100, "num_claims": 60, "seed": 3}}
# the scratch worlds train no model: HARIS on the base model alone (the default adds warm and trained)
BASE_ONLY = [{"name": "HARIS (base)", "reason": "base", "search": "base"}]


def _write_params(path: Path, evaluate: dict) -> None:
    path.write_text(yaml.safe_dump({"prepare": TINY_WORLD, "index": {"embedder": "minilm", "chunk_size": 64},
                                    "evaluate": {"checkpoints": BASE_ONLY} | evaluate}))


@pytest.fixture
def tiny_world(tmp_path, monkeypatch, repo_root):
    """A prepared demo world and its BM25 index (no embedding: seconds) in a scratch directory."""
    from factrl.retrieval.index import build_index
    from stages import prepare as prepare_stage

    monkeypatch.chdir(tmp_path)
    _write_params(tmp_path / "params.yaml", {})
    prepare_stage.main("params.yaml")
    build_index(tmp_path / "data" / "passages.parquet", tmp_path / "index", embedder=None, bm25=True)
    return tmp_path


def test_stage_writes_metrics_report_plots_and_traces(tiny_world, shared_data):
    evaluate = {
        "sets": [{"name": "demo", "path": "data/claims/eval.parquet"},
                 {"name": "hover_2hop", "path": str(shared_data / "haris_eval" / "hover_2hop.jsonl"),
                  "passages": str(shared_data / "haris_eval" / "passages.jsonl"), "optional": True},
                 {"name": "checkwhy", "path": "absent/checkwhy.jsonl", "optional": True}],
        "per_hop": 4, "retrieval_mode": "bm25", "n_boot": 100, "trace_claims": 2,  # all four systems
    }
    _write_params(tiny_world / "params.yaml", evaluate)
    from factrl.rl.step_log import write_history

    write_history([{"step": 1, "reward_mean": 0.2, "loss": 0.5}, {"step": 2, "reward_mean": 0.4, "loss": 0.4}],
                  tiny_world / "metrics" / "train" / "reason_r1")  # a training run's DVCLive curves
    out = stage.main("params.yaml", llm_loader=lambda spec: ScriptedLLM())

    metrics = json.loads((tiny_world / "metrics" / "eval.json").read_text())
    assert set(metrics) == {"demo", "hover_2hop"}  # the missing optional set is skipped
    assert set(metrics["demo"]) == {"2hop", "3hop", "4hop"}
    cell = metrics["demo"]["2hop"]["HARIS (base)"]
    assert cell["n"] == 4 and 0.0 <= cell["accuracy"] <= 1.0 and cell["avg_questions"] == 1.0
    assert metrics["hover_2hop"]["2hop"]["HARIS (base)"]["n"] == 4

    md = (tiny_world / "reports" / "eval.md").read_text()
    assert "checkwhy: skipped, absent/checkwhy.jsonl not found" in md
    # hover_2hop fills the Table 1 row; the demo world goes to the other-datasets table
    row = next(line for line in md.splitlines() if line.startswith("| HARIS (base) | "))
    assert row.split("|")[2].strip() != "–"
    assert "demo 2-hop Acc" in md and "HARIS (paper) | 69.31" in md
    assert "![accuracy](../plots/eval/accuracy.png)" in md and "reward_curves" in md
    for name in ("accuracy.png", "reward_curves.png"):
        assert (tiny_world / "plots" / "eval" / name).read_bytes()[:4] == b"\x89PNG"
    html = (tiny_world / "reports" / "traces.html").read_text()
    # 2 sets x 2 claims x (HARIS reasoning + search, single agent, RAG, Decompose-Then-Verify)
    assert html.count('<section class="rollout') == 2 * 2 * 5
    for system in ("Single agent", "RAG", "Decomp-Verify"):
        assert metrics["demo"]["3hop"][system]["n"] == 4
    assert set(out) == {"metrics", "predictions", "gains", "accuracy_plot", "reward_plot", "report", "traces",
                        "calibration", "reliability_plot"}
    import pyarrow.parquet as pq

    preds = pq.read_table(tiny_world / "metrics" / "predictions.parquet").to_pylist()
    assert {p["system"] for p in preds} >= {"RAG", "Single agent"} and all(p["claim_id"] for p in preds)
    # calibration (on by default): a map fitted on dev claims, the calibrated confidence of every HARIS
    # prediction, ECE / Brier before and after in eval.json, diagrams in the report
    haris = [p for p in preds if p["system"] == "HARIS (base)"]
    assert all(p["raw_confidence"] is not None and 0 <= p["confidence"] <= 1 for p in haris)
    assert all(p["raw_confidence"] is None and p["confidence"] is None for p in preds if p["system"] == "RAG")
    from factrl.eval.calibration import Calibrator

    cal = Calibrator.load(tiny_world / "metrics" / "calibration" / "haris-base.json")
    assert cal.method == "grounded" and cal.fitted_on.startswith("data/claims/dev.parquet") and cal.n > 0
    assert cal.parameters["features"] == ["evidence_share", "subject_cited", "answered_share", "read_share"]
    assert cal.checkpoint == {"name": "HARIS (base)", "reason": "smollm2-135m", "search": "smollm2-135m"}
    assert {"ece_raw", "ece_calibrated", "brier_raw", "brier_calibrated"} <= set(metrics["demo"]["2hop"]["HARIS (base)"])
    assert "ece_raw" not in metrics["demo"]["2hop"]["RAG"]
    assert "## Calibrated confidence" in md and "reliability diagram" in md and "Coverage-accuracy" in md
    details = json.loads((tiny_world / "metrics" / "calibration.json").read_text())
    assert set(details["maps"]) == {"HARIS (base)"} and details["measured"]["demo"]["HARIS (base)"]["all"]["coverage"]
    gains = json.loads((tiny_world / "metrics" / "gains.json").read_text())
    assert gains == {}  # one HARIS checkpoint (base): nothing to pair; paired_gains has its own test


def test_real_sets_run_only_when_switched_on_or_alone_into_their_own_outputs(tiny_world):
    """`make demo` scores `sets`; `real_sets` join them with `real: true`, or run alone (make eval-real)
    into metrics/eval_real.json and reports/eval_real.md, leaving the stage's outputs alone."""
    evaluate = {"sets": [{"name": "demo", "path": "data/claims/eval.parquet"}],
                "real_sets": [{"name": "real_a", "path": "data/claims/dev.parquet"},
                              {"name": "real_b", "path": "absent/real_b.jsonl", "optional": True}],
                "per_hop": 2, "systems": ["haris"], "retrieval_mode": "bm25", "n_boot": 20, "trace_claims": 1}
    _write_params(tiny_world / "params.yaml", evaluate)
    llm = lambda spec: ScriptedLLM()  # noqa: E731
    stage.main("params.yaml", llm_loader=llm)
    assert set(json.loads((tiny_world / "metrics" / "eval.json").read_text())) == {"demo"}
    stage.main("params.yaml", real_only=True, llm_loader=llm)
    assert set(json.loads((tiny_world / "metrics" / "eval_real.json").read_text())) == {"real_a"}
    assert set(json.loads((tiny_world / "metrics" / "eval.json").read_text())) == {"demo"}  # untouched
    md = (tiny_world / "reports" / "eval_real.md").read_text()
    assert "real_b: skipped" in md and (tiny_world / "plots" / "eval_real" / "accuracy.png").exists()
    _write_params(tiny_world / "params.yaml", evaluate | {"real": True})
    stage.main("params.yaml", llm_loader=llm)
    assert set(json.loads((tiny_world / "metrics" / "eval.json").read_text())) == {"demo", "real_a"}
    _write_params(tiny_world / "params.yaml", evaluate | {"real_sets": [{"name": "x", "path": "nope.jsonl"}]})
    with pytest.raises(FileNotFoundError, match=r"evaluate.real_sets\[0\] \(x\): nope.jsonl does not exist"):
        stage.main("params.yaml", real_only=True, llm_loader=llm)


def test_calibration_off_evaluates_no_dev_claims_and_leaves_an_empty_map_directory(tiny_world):
    llm = ScriptedLLM()
    _write_params(tiny_world / "params.yaml", {"per_hop": 2, "systems": ["haris"], "n_boot": 20, "trace_claims": 0,
                                               "retrieval_mode": "bm25", "calibration": {"method": "none"}})
    stale = tiny_world / "metrics" / "calibration" / "haris-old.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    stage.main("params.yaml", llm_loader=lambda spec: llm)
    assert list((tiny_world / "metrics" / "calibration").iterdir()) == []
    metrics = json.loads((tiny_world / "metrics" / "eval.json").read_text())
    assert "ece_raw" not in metrics["demo"]["2hop"]["HARIS (base)"]
    assert "calibration: off" in (tiny_world / "reports" / "eval.md").read_text()
    # with calibration on, the dev sample runs too (2 claims per hop x 3 hops)
    _write_params(tiny_world / "params.yaml", {"per_hop": 2, "systems": ["haris"], "n_boot": 20, "trace_claims": 0,
                                               "retrieval_mode": "bm25", "calibration": {"dev_per_hop": 2}})
    calls_off = sum(llm.calls)
    llm.calls.clear()
    stage.main("params.yaml", llm_loader=lambda spec: llm)
    assert sum(llm.calls) > calls_off  # the dev claims ran too
    assert Calibrator_load(tiny_world).n == 6


def test_calibration_fits_maps_only_for_the_named_checkpoints(tiny_world):
    """evaluate.calibration.checkpoints: only those checkpoints run the dev claims and get a map (the
    ones `factrl serve` reads); the others keep their raw confidence and their ECE before calibration."""
    llm = ScriptedLLM()
    two = [{"name": "HARIS (base)", "reason": "base", "search": "base"},
           {"name": "HARIS (other)", "reason": "base", "search": "base"}]
    common = {"per_hop": 2, "systems": ["haris"], "n_boot": 20, "trace_claims": 0, "retrieval_mode": "bm25",
              "checkpoints": two}
    _write_params(tiny_world / "params.yaml", common | {"calibration": {"dev_per_hop": 2}})
    stage.main("params.yaml", llm_loader=lambda spec: llm)
    calls_all = sum(llm.calls)
    assert sorted(p.name for p in (tiny_world / "metrics" / "calibration").iterdir()) == [
        "haris-base.json", "haris-other.json"]
    llm.calls.clear()
    _write_params(tiny_world / "params.yaml",
                  common | {"calibration": {"dev_per_hop": 2, "checkpoints": ["HARIS (other)"]}})
    stage.main("params.yaml", llm_loader=lambda spec: llm)
    assert sum(llm.calls) < calls_all  # one checkpoint's dev runs fewer
    assert [p.name for p in (tiny_world / "metrics" / "calibration").iterdir()] == ["haris-other.json"]
    metrics = json.loads((tiny_world / "metrics" / "eval.json").read_text())
    assert "ece_calibrated" in metrics["demo"]["2hop"]["HARIS (other)"]
    assert "ece_calibrated" not in metrics["demo"]["2hop"]["HARIS (base)"]
    assert "ece_raw" in metrics["demo"]["2hop"]["HARIS (base)"]
    # a checkpoint named there but not evaluated (a run of the base pair alone) gets no map, no error
    _write_params(tiny_world / "params.yaml", common | {"calibration": {"dev_per_hop": 2, "checkpoints": ["HARIS (served)"]}})
    stage.main("params.yaml", llm_loader=lambda spec: llm)
    assert list((tiny_world / "metrics" / "calibration").iterdir()) == []


def Calibrator_load(root):  # noqa: N802 - a small helper for the test above
    from factrl.eval.calibration import Calibrator

    return Calibrator.load(root / "metrics" / "calibration" / "haris-base.json")


def test_local_models_load_at_the_evaluate_precision(tiny_world, monkeypatch):
    """evaluate.precision reaches every local model the stage loads (bf16-trained checkpoints can be
    decoded in fp32), and the report says which precision ran."""
    loaded = []

    def load_llm(spec, device="auto", precision="auto"):
        loaded.append((spec, precision))
        return ScriptedLLM()

    monkeypatch.setattr(recipe, "load_llm", load_llm)
    _write_params(tiny_world / "params.yaml", {"per_hop": 2, "systems": ["haris", "rag"], "n_boot": 20,
                                               "retrieval_mode": "bm25", "trace_claims": 0, "precision": "fp32"})
    stage.main("params.yaml")
    assert loaded and {precision for _, precision in loaded} == {"fp32"}
    assert "in fp32 (precision: fp32)" in (tiny_world / "reports" / "eval.md").read_text()


def test_runner_load_llm_gives_the_local_engine_its_precision():
    assert load_llm("smollm2-135m", device="cpu", precision="fp32").precision == "fp32"


def test_demo_eval_split_has_60_balanced_claims_per_hop(repo_root):
    """params.yaml's world and split leave 60 claims per hop setting, half per label: the 60 per hop
    bench/learning.py evaluates, of which the demo's evaluate.per_hop samples its 40."""
    from factrl.data.splits import stratified_split
    from factrl.data.world_claims import generate_claims

    params = repo_root / "params.yaml"
    prepare, evaluate = load_section(PrepareParams, params), load_section(EvaluateParams, params)
    assert 0 < evaluate.per_hop <= 60 and not evaluate.real
    held = stratified_split(generate_claims(prepare.world), prepare.split_fractions, prepare.seed)["eval"]
    counts = {}
    for hops, label in zip(held.column("num_hops").to_pylist(), held.column("label").to_pylist()):
        counts[(hops, label)] = counts.get((hops, label), 0) + 1
    assert counts == {(h, lab): 30 for h in prepare.world.hops for lab in ("SUPPORTS", "REFUTES")}


def test_reward_points_from_training_metrics(tmp_path):
    from factrl.rl.step_log import write_history

    write_history([{"step": 1, "reward_mean": 0.1}, {"step": 2, "reward_mean": 0.3}], tmp_path / "search_r2")
    write_history([{"step": 1, "reward_mean": 0.5}], tmp_path / "reason_r1")
    write_history([{"step": 1, "reward_mean": 9.0}], tmp_path / "notes")  # no agent in the name: ignored
    (tmp_path / "reason_r3.csv").write_text("step,reward_mean\n1,0.5\n")  # not a DVCLive directory: ignored
    points = recipe.reward_points(tmp_path)
    assert points == [{"agent": "reason", "round": 1, "step": 1, "reward": 0.5},
                      {"agent": "search", "round": 2, "step": 1, "reward": 0.1},
                      {"agent": "search", "round": 2, "step": 2, "reward": 0.3}]
    assert recipe.reward_points(tmp_path / "absent") == []


def test_checkpoints_default_to_base_warm_and_trained(tmp_path, monkeypatch):
    """By default HARIS runs on the base model, the warm start and the last round of params rounds."""
    monkeypatch.chdir(tmp_path)
    params = tmp_path / "params.yaml"
    rounds = {"1": {"prev": 0, "segment": "all"}, "2": {"prev": 1, "segment": "seg1"}}
    params.write_text(yaml.safe_dump({"model": {"base": "smollm2-135m"}, "evaluate": {}, "rounds": rounds}))
    with pytest.raises(FileNotFoundError, match=r"checkpoints\[1\].reason: warm = models/reason_0 does not exist"):
        recipe.resolve_checkpoints(load_section(EvaluateParams, params), params)
    for name in ("reason_0", "search_0", "reason_2", "search_2"):
        (tmp_path / "models" / name).mkdir(parents=True)
    assert recipe.resolve_checkpoints(load_section(EvaluateParams, params), params) == [
        ("HARIS (base)", "smollm2-135m", "smollm2-135m"),
        ("HARIS (warm)", str(Path("models/reason_0")), str(Path("models/search_0"))),
        ("HARIS (trained)", str(Path("models/reason_2")), str(Path("models/search_2")))]
    params.write_text(yaml.safe_dump({"evaluate": {"checkpoints": [
        {"name": "HARIS r4", "reason": "models/reason_4", "search": "models/search_4"}]}}))
    with pytest.raises(FileNotFoundError, match=r"evaluate.checkpoints\[0\].reason: models/reason_4 does not exist"):
        recipe.resolve_checkpoints(load_section(EvaluateParams, params), params)
    params.write_text(yaml.safe_dump({"evaluate": {"checkpoints": [], "systems": ["haris"]}}))
    with pytest.raises(ConfigError, match=r"evaluate.checkpoints: empty, but systems has haris"):
        recipe.resolve_checkpoints(load_section(EvaluateParams, params), params)


def test_sets_are_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"evaluate": {"sets": [{"name": "x", "path": "nope.jsonl"}]}}))
    with pytest.raises(FileNotFoundError, match=r"evaluate.sets\[0\] \(x\): nope.jsonl does not exist"):
        recipe.load_sets(load_section(EvaluateParams, params))
    params.write_text(yaml.safe_dump({"evaluate": {"sets": [{"name": "x", "path": "a.jsonl", "hub": "hover"}]}}))
    with pytest.raises(ValueError, match="exactly one of path and hub"):
        recipe.load_sets(load_section(EvaluateParams, params))


def test_a_set_with_its_own_index_is_searched_like_index_dir(tiny_world):
    """A set of another world with an index built by stage index's code (bench/learning.py's unseen
    world) is searched over that index with evaluate.retrieval_mode, not over index/ nor with BM25
    alone; passages and index together are refused."""
    from factrl.data.params import WorldParams
    from factrl.data.world import write_world
    from stages import index as index_stage

    other = tiny_world / "other"
    other.mkdir()
    write_world(WorldParams(seed=99, num_passages=50, num_claims=12, hops=(2,)), other / "passages.parquet",
                other / "claims.parquet")
    index_stage.main("params.yaml", passages=other / "passages.parquet", out=other / "index")  # minilm: dense too
    spec = {"name": "other", "path": str(other / "claims.parquet"), "index": str(other / "index")}
    _write_params(tiny_world / "params.yaml", {"sets": [spec], "retrieval_mode": "hybrid"})
    [own], _ = recipe.load_sets(load_section(EvaluateParams, tiny_world / "params.yaml"))
    assert own.retriever.mode == "hybrid" and own.retriever.dir == other / "index"
    claim = own.claims.to_pylist()[0]
    gold = set(claim["hops"][0]["passage_ids"])
    assert gold & {h.id for h in own.retriever.search([claim["hops"][0]["question"]], k=3)[0]}
    _write_params(tiny_world / "params.yaml", {"sets": [spec | {"passages": str(other / "passages.parquet")}]})
    with pytest.raises(ValueError, match="at most one of passages"):
        recipe.load_sets(load_section(EvaluateParams, tiny_world / "params.yaml"))


def test_dvc_deps_cover_every_model_checkpoint_of_any_round(repo_root):
    """evaluate reads checkpoints by symbolic name (resolved against params model and rounds): it
    depends on all of models/ and on those params, and names no round in dvc.yaml, so adding a round
    or changing the base model needs no dvc.yaml edit."""
    stages = yaml.safe_load((repo_root / "dvc.yaml").read_text())["stages"]
    for name in ("evaluate", "debate"):
        deps, params = stages[name]["deps"], stages[name]["params"]
        assert "models" in deps and {"model", "rounds"} <= set(params), name
        assert not [d for d in deps if str(d).startswith("models/")], f"{name}: a hard-coded round in dvc.yaml"
    assert "model" in stages["warmup"]["params"]
    assert "data/claims" in stages["evaluate"]["deps"] and "index" in stages["evaluate"]["deps"]


# --------------------------------------------------------------------------------------------
# DVC: only `evaluate` reruns after an edit of its params (real SmolLM2, tiny budget)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def dvc_repo(tmp_path, repo_root, monkeypatch):
    evaluate = {"sets": [{"name": "demo", "path": "data/claims/eval.parquet"},
                         {"name": "hover_2hop", "path": "../shared/data/haris_eval/hover_2hop.jsonl",
                          "optional": True}],
                "per_hop": 2, "systems": ["haris"], "max_new_tokens": 8, "max_turns": 1, "n_boot": 100,
                "retrieval_mode": "bm25", "trace_claims": 1,
                "checkpoints": BASE_ONLY}
    repo = make_pipeline_repo(repo_root, tmp_path / "repo", {
        "prepare": TINY_WORLD, "index": {"embedder": "minilm", "chunk_size": 64}, "evaluate": evaluate})
    # base models only, so evaluate depends on no trained model and no debate (else reproducing it
    # trains both rounds and runs the SC-MAKS stages; evaluate scores no consensus rows without them)
    stages = yaml.safe_load((repo / "dvc.yaml").read_text())
    deps = stages["stages"]["evaluate"]["deps"]
    stages["stages"]["evaluate"]["deps"] = [d for d in deps if d != "models" and not str(d).startswith("consensus/")]
    (repo / "dvc.yaml").write_text(yaml.safe_dump(stages, sort_keys=False))
    monkeypatch.chdir(repo)
    return repo


def _reproduce(repo, target: str) -> list[str]:
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc:
        return [stage.addressing for stage in dvc.reproduce(target)]


@pytest.mark.slow
def test_evaluate_param_edit_reruns_only_evaluate(dvc_repo):
    assert _reproduce(dvc_repo, "evaluate") == ["prepare", "index", "evaluate"]
    metrics = json.loads((dvc_repo / "metrics" / "eval.json").read_text())
    assert set(metrics) == {"demo"}  # ../shared is not beside the scratch repo: the optional set is skipped
    assert (dvc_repo / "reports" / "eval.md").exists() and (dvc_repo / "plots" / "eval" / "accuracy.png").exists()
    edit_params(dvc_repo, {"evaluate": {"seed": 5}})
    assert _reproduce(dvc_repo, "evaluate") == ["evaluate"]
    edit_params(dvc_repo, {"curriculum": {"seed": 99}})  # another stage's params
    assert _reproduce(dvc_repo, "evaluate") == []


# --------------------------------------------------------------------------------------------
# factrl evaluate on a 20-claim sample of ../shared/data/haris_eval
# --------------------------------------------------------------------------------------------


@pytest.fixture
def claims_sample(tmp_path, shared_data) -> Path:
    """20 HOVER 2-hop claims, 10 per label."""
    lines = (shared_data / "haris_eval" / "hover_2hop.jsonl").read_text(encoding="utf-8").splitlines()
    picked = {"SUPPORTS": [], "REFUTES": []}
    for line in lines:
        rec = json.loads(line)
        if len(picked[rec["label"]]) < 10:
            picked[rec["label"]].append(line)
    path = tmp_path / "hover_2hop_sample.jsonl"
    path.write_text("\n".join(picked["SUPPORTS"] + picked["REFUTES"]) + "\n", encoding="utf-8")
    return path


def _check_cli_outputs(out: Path, system: str, n: int) -> dict:
    metrics = json.loads((out / "metrics.json").read_text())
    cell = metrics["hover_2hop_sample"]["2hop"][system]
    assert cell["n"] == n and 0.0 <= cell["accuracy"] <= 1.0
    md = (out / "eval.md").read_text()
    assert md.startswith("# Evaluation: hover_2hop_sample") and f"| {system} |" in md
    assert (out / "plots" / "accuracy.png").exists() and (out / "traces.html").exists()
    assert (out / "index" / "manifest.json").exists()
    return metrics


def test_cli_on_haris_eval_sample_with_scripted_llm(tmp_path, claims_sample, shared_data):
    out = tmp_path / "out"
    loaded = []
    argv = ["--claims", str(claims_sample), "--passages", str(shared_data / "haris_eval" / "passages.jsonl"),
            "--out", str(out), "--per-hop", "20", "--n-boot", "200"]  # every system
    assert cli.main(argv, llm_loader=lambda spec: loaded.append(spec) or ScriptedLLM()) == 0
    assert loaded == ["smollm2-135m"]  # one engine shared by HARIS and the baselines
    metrics = _check_cli_outputs(out, "HARIS (smollm2-135m)", 20)
    # the scripted model supports every claim without a marker: half right on a balanced sample
    for system in ("HARIS (smollm2-135m)", "Single agent", "RAG", "Decomp-Verify"):
        assert metrics["hover_2hop_sample"]["2hop"][system]["accuracy"] == 0.5


def test_cli_help_names_the_bm25_default():
    proc = subprocess.run([sys.executable, "-m", "factrl.cli", "evaluate", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "--claims" in proc.stdout and "BM25 only" in proc.stdout


@pytest.mark.slow
def test_cli_on_haris_eval_sample_with_smollm2(tmp_path, claims_sample, shared_data, repo_root):
    out = tmp_path / "out"
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "factrl.cli", "evaluate", "--claims", str(claims_sample),
         "--passages", str(shared_data / "haris_eval" / "passages.jsonl"), "--out", str(out),
         "--systems", "haris", "rag", "--per-hop", "20", "--max-new-tokens", "24", "--max-turns", "1"],
        capture_output=True, text=True, cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = _check_cli_outputs(out, "HARIS (smollm2-135m)", 20)
    assert metrics["hover_2hop_sample"]["2hop"]["RAG"]["n"] == 20
    print(f"factrl evaluate, 20 claims, SmolLM2: {time.perf_counter() - started:.1f} s")


# --------------------------------------------------------------------------------------------
# Prefect: the pipeline run publishes the eval metrics (markdown section + table artifact)
# --------------------------------------------------------------------------------------------


def test_eval_table_for_the_pipeline_artifacts(tmp_path):
    from factrl.orchestration import pipeline

    assert pipeline._eval_table(tmp_path / "eval.json") == []  # evaluate has not run
    rows = [{"dataset": "checkwhy", "system": "HARIS r1", "num_hops": None, "metric": "accuracy", "value": 0.608,
             "ci_low": 0.5, "ci_high": 0.7, "n": 250}]
    (tmp_path / "eval.json").write_text(json.dumps(report.nested_metrics(rows)))
    assert pipeline._eval_table(tmp_path / "eval.json") == [
        {"dataset": "checkwhy", "hops": "all", "system": "HARIS r1", "accuracy": 60.8, "accuracy_ci95": "[50.0, 70.0]",
         "f1_weighted": "", "n": 250, "avg_questions": 0.0, "avg_searches": 0.0}]


@pytest.mark.slow
def test_pipeline_run_publishes_eval_table(tmp_path, repo_root):
    from prefect import flow
    from prefect.client.orchestration import get_client

    from factrl.orchestration import pipeline
    from factrl.testing.prefect_harness import prefect_harness

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True)
    rows = [{"dataset": "demo", "system": "RAG", "num_hops": 2, "metric": m, "value": v, "ci_low": v - 0.1,
             "ci_high": v + 0.1, "n": 20} for m, v in (("accuracy", 0.55), ("f1_weighted", 0.5), ("avg_searches", 1.0))]
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "eval.json").write_text(json.dumps(report.nested_metrics(rows)))

    @flow
    def publish():
        pipeline._publish_metrics(str(tmp_path), {"evaluate": True})

    async def artifacts():
        async with get_client() as client:
            return {a.key: a for a in await client.read_artifacts()}

    import asyncio

    with prefect_harness():
        publish()
        found = asyncio.run(artifacts())
    table = found["factrl-eval"].data
    table = json.loads(table) if isinstance(table, str) else table
    assert table == [{"dataset": "demo", "hops": "2hop", "system": "RAG", "accuracy": 55.0,
                      "accuracy_ci95": "[45.0, 65.0]", "f1_weighted": 50.0, "n": 20, "avg_questions": 0.0,
                      "avg_searches": 1.0}]
    md = found["factrl-pipeline-run"].data
    assert "## Evaluation (metrics/eval.json)" in md and "| demo | 2hop | RAG | 55.0 |" in md

