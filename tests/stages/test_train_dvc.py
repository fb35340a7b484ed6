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
from tests.pipeline_repo import edit_params, make_pipeline_repo


def _touch(p: Path) -> None:
    if p.exists():
        return
    if p.suffix:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("stand-in\n")
    else:
        p.mkdir(parents=True, exist_ok=True)
        (p / "stand-in").write_text("stand-in\n")


@pytest.fixture
def committed_repo(tmp_path, repo_root, monkeypatch):
    repo = make_pipeline_repo(repo_root, tmp_path / "repo", {})
    monkeypatch.chdir(repo)
    return commit_stand_ins(repo)


def commit_stand_ins(repo: Path) -> Path:
    """Stand-in files for every stage's deps and outs, recorded with ``dvc commit``: up to date."""
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
    ids = [r.id for r in load_section("rounds", committed_repo / "params.yaml").rounds]
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
    ids = [r.id for r in load_section("rounds", committed_repo / "params.yaml").rounds]
    edit_params(committed_repo, {"train": {"search": {"lr": 2e-6}}})
    assert _dry(committed_repo) == [f"train_search@{i}" for i in ids]


def test_warmup_edit_reruns_warmup_and_what_follows_it_only(committed_repo):
    ids = [r.id for r in load_section("rounds", committed_repo / "params.yaml").rounds]
    edit_params(committed_repo, {"warmup": {"reasoning": {"lr": 3e-5}}})
    assert _dry(committed_repo) == ["warmup"]
    later = _downstream(committed_repo, ["warmup"])
    # every round starts from H_0 / L_0 in the end; the data, index and curriculum stay as they are
    assert {f"{stage}@{i}" for i in ids for stage in ("synthesize", "train_search", "train_reason")} <= later
    assert "evaluate" in later
    assert not {"prepare", "index", "curriculum"} & later
    edit_params(committed_repo, {"warmup": {"enabled": False}})  # switching it off is a warmup edit too
    assert _dry(committed_repo) == ["warmup"]


def test_rounds_chain_as_algorithm_1(committed_repo):
    """train_search@r needs qa_r and L_prev; train_reason@r needs L_r and H_prev; synthesize@r+1
    needs both agents of round r."""
    rounds = load_section("rounds", committed_repo / "params.yaml").rounds
    with Repo(str(committed_repo)) as dvc:
        graph = dvc.index.graph
        by_name = {s.addressing: s for s in graph.nodes}
        for r in rounds:
            upstream = {s.addressing for s in nx.descendants(graph, by_name[f"train_reason@{r.id}"])}
            assert {f"train_search@{r.id}", f"synthesize@{r.id}", "curriculum", "index"} <= upstream
            if r.prev > 0:  # round r starts from the agents round prev trained
                start = {s.addressing for s in nx.descendants(graph, by_name[f"synthesize@{r.id}"])}
                assert {f"train_reason@{r.prev}", f"train_search@{r.prev}"} <= start
