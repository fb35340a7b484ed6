"""Stage `curriculum`: files and manifest on a tiny world, and DVC reruns only what a param edit affects."""

from __future__ import annotations

import json

import networkx as nx
import pyarrow.parquet as pq
import pytest
import yaml
from dvc.repo import Repo

from factrl.data.params import WorldParams
from factrl.data.world_claims import generate_claims
from factrl.io import write_parquet
from factrl.testing.pipeline_repo import edit_params, make_pipeline_repo
from stages import curriculum


def test_stage_writes_pieces_and_manifest(tmp_path, monkeypatch):
    train = generate_claims(WorldParams(seed=2, num_passages=200, num_claims=48, hops=(2, 3)))
    write_parquet(train, tmp_path / "data" / "claims" / "train.parquet")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"curriculum": {"segments": 4, "seed": 3}}))
    monkeypatch.chdir(tmp_path)
    info = curriculum.main("params.yaml")
    names = sorted(p.stem for p in (tmp_path / "segments").glob("*.parquet"))
    assert names == ["all", "m2r_stage1", "m2r_stage2", "seg1", "seg2", "seg3", "seg4"]
    manifest = json.loads((tmp_path / "segments" / "manifest.json").read_text())
    assert manifest == json.loads(json.dumps(info))
    assert manifest["seed"] == 3 and manifest["segments"] == 4
    assert sum(manifest["pieces"][f"seg{i}"]["rows"] for i in range(1, 5)) == train.num_rows
    assert manifest["pieces"]["seg1"]["counts"] == {"REFUTES|2": 3, "REFUTES|3": 3, "SUPPORTS|2": 3, "SUPPORTS|3": 3}
    assert pq.read_table(tmp_path / "segments" / "all.parquet").num_rows == train.num_rows
    # fewer segments on a rerun: the extra files go
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"curriculum": {"segments": 2, "seed": 3}}))
    curriculum.main("params.yaml")
    assert not (tmp_path / "segments" / "seg3.parquet").exists()


@pytest.fixture
def pipeline_repo(tmp_path, repo_root, monkeypatch):
    tiny = {"prepare": {"source": "world", "world": {"seed": 4, "num_passages": 100, "num_claims": 60, "hops": [2, 3]}},
            "index": {"embedder": "minilm", "chunk_size": 64}}
    repo = make_pipeline_repo(repo_root, tmp_path / "repo", tiny)
    monkeypatch.chdir(repo)
    return repo


def reproduce(repo, target):
    with Repo(str(repo)) as dvc:
        return [s.addressing for s in dvc.reproduce(target)]


def test_param_edit_reruns_curriculum_and_downstream_only(pipeline_repo):
    assert reproduce(pipeline_repo, "curriculum") == ["prepare", "curriculum"]
    assert reproduce(pipeline_repo, "curriculum") == []
    edit_params(pipeline_repo, {"curriculum": {"seed": 99}})
    assert reproduce(pipeline_repo, "curriculum") == ["curriculum"]  # prepare skipped
    with Repo(str(pipeline_repo)) as dvc:
        graph = dvc.index.graph
        by_name = {s.addressing: s for s in graph.nodes}
        downstream = {s.addressing for s in nx.ancestors(graph, by_name["curriculum"])}  # edges point upstream
        upstream = {s.addressing for s in nx.descendants(graph, by_name["curriculum"])}
    round_ids = yaml.safe_load((pipeline_repo / "params.yaml").read_text())["rounds"]
    assert {f"synthesize@{i}" for i in round_ids} <= downstream
    assert upstream == {"prepare"} and "index" not in downstream
