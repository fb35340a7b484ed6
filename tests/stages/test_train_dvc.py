"""The training stages in the DVC graph: a learning-rate edit of one agent reruns only that agent's
train stages and what follows them, a warm-start edit reruns ``warmup`` and everything after it;
the rounds chain as HARIS Algorithm 1.

Every stage's outputs are stand-in files recorded with ``dvc commit`` (the pipeline is up to date
without running it), then a param edit and ``reproduce(dry=True)`` show which stages DVC would run.
The tiny profile runs the real pipeline end to end in ``test_train_e2e.py``.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
from dvc.repo import Repo

from factrl.config import load_section
from factrl.model_names import RoundsParams, resolve_model
from factrl.testing.pipeline_repo import edit_params, make_pipeline_repo


def _touch(p: Path) -> None:
    if p.exists():
        return
    if p.suffix:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("stand-in\n")
    else:
        p.mkdir(parents=True, exist_ok=True)
        (p / "stand-in").write_text("stand-in\n")


def commit_stand_ins(repo: Path) -> Path:
    """Stand-in files for every stage's deps and outs of ``repo``, recorded with ``dvc commit``, so
    the pipeline is up to date without running it."""
    with Repo(str(repo)) as dvc:
        for stage in dvc.index.stages:
            for dep in stage.deps:
                if dep.fs_path.startswith(str(repo)):
                    _touch(Path(dep.fs_path))
            for out in stage.outs:
                _touch(Path(out.fs_path))
        dvc.commit(None, force=True)
        assert dvc.reproduce(dry=True) == []
    return repo


@pytest.fixture
def committed_repo(tmp_path, repo_root, monkeypatch):
    repo = make_pipeline_repo(repo_root, tmp_path / "repo", {})
    monkeypatch.chdir(repo)
    return commit_stand_ins(repo)


def _dry(repo: Path) -> list[str]:
    with Repo(str(repo)) as dvc:
        return [s.addressing for s in dvc.reproduce(dry=True)]


def _downstream(repo: Path, names: list[str]) -> set[str]:
    with Repo(str(repo)) as dvc:
        graph = dvc.index.graph
        by_name = {s.addressing: s for s in graph.nodes}
        out: set[str] = set()
        for n in names:
            out |= {s.addressing for s in nx.ancestors(graph, by_name[n])}  # edges point upstream
    return out


def test_reasoning_lr_edit_reruns_only_train_reason_and_what_follows(committed_repo):
    ids = [r.id for r in load_section(RoundsParams, committed_repo / "params.yaml").rounds]
    edit_params(committed_repo, {"train": {"reasoning": {"lr": 2e-6}}})
    changed = _dry(committed_repo)
    assert changed == [f"train_reason@{i}" for i in ids]  # stages are named by round id
    # what can rerun after them is downstream of train_reason@1: the later rounds and evaluation,
    # never the data, index, curriculum, base models or round 1's synthesis / search training
    later = _downstream(committed_repo, changed)
    untouched = {"prepare", "index", "curriculum", "warmup", "synthesize@1", "train_search@1"}
    assert not untouched & (later | set(changed))
    if len(ids) > 1:
        assert {"synthesize@2", "train_search@2"} <= later


def test_search_lr_edit_reruns_train_search_only(committed_repo):
    ids = [r.id for r in load_section(RoundsParams, committed_repo / "params.yaml").rounds]
    edit_params(committed_repo, {"train": {"search": {"lr": 2e-6}}})
    assert _dry(committed_repo) == [f"train_search@{i}" for i in ids]


def test_warmup_edit_reruns_warmup_and_what_follows_it_only(committed_repo):
    ids = [r.id for r in load_section(RoundsParams, committed_repo / "params.yaml").rounds]
    edit_params(committed_repo, {"warmup": {"reasoning": {"lr": 3e-5}}})
    assert _dry(committed_repo) == ["warmup"]
    later = _downstream(committed_repo, ["warmup"])
    # every round starts from H_0 / L_0 in the end; the data, index and curriculum stay as they are
    assert {f"{stage}@{i}" for i in ids for stage in ("synthesize", "train_search", "train_reason")} <= later
    assert "evaluate" in later
    assert not {"prepare", "index", "curriculum"} & later
    edit_params(committed_repo, {"warmup": {"enabled": False}})  # switching it off is a warmup edit too
    assert _dry(committed_repo) == ["warmup"]


def test_a_world_edit_reruns_prepare_and_everything_that_reads_its_claims(committed_repo):
    """Turning the hard world on (prepare.world.difficulty) reruns prepare; everything downstream of
    the claims, the warm start's clean claims (data/claims/warm.parquet) included, follows it."""
    edit_params(committed_repo, {"prepare": {"world": {"difficulty": {"homonyms": 0.3, "wordings": 3}}}})
    assert _dry(committed_repo) == ["prepare"]
    later = _downstream(committed_repo, ["prepare"])
    ids = [r.id for r in load_section(RoundsParams, committed_repo / "params.yaml").rounds]
    assert {"index", "curriculum", "warmup", "evaluate"} | {f"train_reason@{i}" for i in ids} <= later
    with Repo(str(committed_repo)) as dvc:
        warmup = next(s for s in dvc.index.stages if s.addressing == "warmup")
        assert any(d.def_path == "data/claims/warm.parquet" for d in warmup.deps)


def test_rounds_chain_as_algorithm_1(committed_repo):
    """train_search@r needs qa_r and L_prev; train_reason@r needs L_r and H_prev; synthesize@r+1
    needs both agents of round r."""
    rounds = load_section(RoundsParams, committed_repo / "params.yaml").rounds
    with Repo(str(committed_repo)) as dvc:
        graph = dvc.index.graph
        by_name = {s.addressing: s for s in graph.nodes}
        for r in rounds:
            upstream = {s.addressing for s in nx.descendants(graph, by_name[f"train_reason@{r.id}"])}
            assert {f"train_search@{r.id}", f"synthesize@{r.id}", "curriculum", "index"} <= upstream
            if r.prev > 0:  # round r starts from the agents round prev trained
                start = {s.addressing for s in nx.descendants(graph, by_name[f"synthesize@{r.id}"])}
                assert {f"train_reason@{r.prev}", f"train_search@{r.prev}"} <= start


def test_base_model_edit_reruns_exactly_the_stages_that_read_it(committed_repo):
    """params model.base is the one key of the base policy: warmup starts from it, debate and evaluate
    run members and checkpoints named `base`; the rounds start from the warm start's output."""
    edit_params(committed_repo, {"model": {"base": "HuggingFaceTB/SmolLM2-360M-Instruct"}})
    assert sorted(_dry(committed_repo)) == ["debate", "evaluate", "warmup"]


def test_a_new_round_reaches_evaluate_and_debate_with_no_dvc_yaml_edit(committed_repo):
    """`last` (evaluate.checkpoints, the debate pool) is the highest round id of params rounds, and both
    stages depend on models/ and on rounds: adding a round changes their inputs, and DVC chains them
    after the new round's training, with dvc.yaml as it was."""
    dvc_yaml = (committed_repo / "dvc.yaml").read_text()
    last = max(r.id for r in load_section(RoundsParams, committed_repo / "params.yaml").rounds)
    new = last + 1
    edit_params(committed_repo, {"rounds": {str(new): {"prev": last, "segment": "seg2", "questions": "all"}}})
    with Repo(str(committed_repo)) as dvc:
        changed = set(dvc.status())  # the new round's inputs do not exist yet: a dry repro would stop there
        assert {f"synthesize@{new}", f"train_search@{new}", f"train_reason@{new}", "evaluate", "debate"} <= changed
        assert "rounds" in str(dvc.status(["evaluate"]))  # evaluate's own params changed, not only upstream
        graph = dvc.index.graph
        by_name = {s.addressing: s for s in graph.nodes}
        for stage in ("evaluate", "debate"):
            upstream = {s.addressing for s in nx.descendants(graph, by_name[stage])}
            assert {f"train_reason@{new}", f"train_search@{new}", "warmup"} <= upstream, stage
    params = committed_repo / "params.yaml"
    assert resolve_model("last", "reason", where="evaluate.checkpoints[2].reason", params_file=params) == str(
        Path(f"models/reason_{new}"))
    assert (committed_repo / "dvc.yaml").read_text() == dvc_yaml


def test_editing_the_corrections_list_or_a_correction_file_reruns_prepare_and_what_follows(committed_repo):
    """Reviewers' corrections reach training through prepare: listing a correction file in
    prepare.corrections, or changing one under corrections/ (prepare's DVC dependency), makes
    `dvc status` list prepare; every stage that reads the claims (index, curriculum, the warm start,
    each round's training, evaluate) is downstream of it and so reruns after it."""
    fixes = committed_repo / "corrections" / "reviewed.jsonl"
    fixes.write_text('{"id": "review-1", "claim": "Orsa was founded by Ilse.", "label": "SUPPORTS", '
                     '"source": "corrections"}\n')
    with Repo(str(committed_repo)) as dvc:
        status = dvc.status()
    assert set(status) == {"prepare"} and "corrections" in str(status["prepare"])  # the file alone: a dep change
    edit_params(committed_repo, {"prepare": {"corrections": ["corrections/reviewed.jsonl"]}})
    with Repo(str(committed_repo)) as dvc:
        status = dvc.status()
    assert set(status) == {"prepare"} and "prepare" in str(status["prepare"])  # the params list changed too
    assert _dry(committed_repo) == ["prepare"]
    later = _downstream(committed_repo, ["prepare"])
    ids = [r.id for r in load_section("rounds", committed_repo / "params.yaml").rounds]
    assert {"index", "curriculum", "warmup", "evaluate"} | {f"train_reason@{i}" for i in ids} <= later

    with Repo(str(committed_repo)) as dvc:  # recorded as run: a reviewer's later edit of the file reruns it
        dvc.commit("prepare", force=True)
        assert dvc.status(["prepare"]) == {}
    fixes.write_text(fixes.read_text().replace('"SUPPORTS"', '"REFUTES"'))
    with Repo(str(committed_repo)) as dvc:
        status = dvc.status()
    assert set(status) == {"prepare"} and "corrections" in str(status["prepare"])
