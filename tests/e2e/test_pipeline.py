"""The DVC pipeline and its Prefect flow, on a copy of the repo with tiny inputs."""

from __future__ import annotations

import pytest
from dvc.repo import Repo

from factrl.testing.pipeline_repo import edit_params, make_pipeline_repo
from factrl.testing.prefect_harness import prefect_harness


@pytest.fixture
def pipeline_repo(tmp_path, repo_root, shared_data, monkeypatch):
    # a 120-passage slice keeps the index stage to seconds
    lines = (shared_data / "haris_eval" / "passages.jsonl").read_text(encoding="utf-8").splitlines()[:120]
    (tmp_path / "passages.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    files = {"claims": [str(shared_data / "haris_eval" / "exfever_2hop.jsonl")],
             "passages": [str(tmp_path / "passages.jsonl")]}
    repo = make_pipeline_repo(repo_root, tmp_path / "repo", {"prepare": {"source": "files", "files": files},
                                                              "index": {"chunk_size": 64, "embedder": "minilm"}})
    monkeypatch.chdir(repo)
    return repo


# The data stages only: the model stages (synthesize, train, evaluate) have their own stage tests and
# a slow end-to-end run of the tiny profile.
DATA_STAGES = ("prepare", "index", "curriculum")


def reproduce(repo, targets=DATA_STAGES) -> list[str]:
    with Repo(str(repo)) as dvc:
        ran = []
        for target in targets:
            ran += [stage.addressing for stage in dvc.reproduce(target) if stage.addressing not in ran]
        return ran


def test_repro_twice_second_is_noop(pipeline_repo):
    first = reproduce(pipeline_repo)
    assert first == ["prepare", "index", "curriculum"]
    assert (pipeline_repo / "index" / "manifest.json").exists()
    assert (pipeline_repo / "data" / "claims" / "train.parquet").exists()
    assert reproduce(pipeline_repo) == []


def test_param_edit_reruns_prepare(pipeline_repo):
    reproduce(pipeline_repo)
    edit_params(pipeline_repo, {"prepare": {"seed": 99}})
    # the passages are unchanged by a new split seed, so DVC skips `index` by its input hash;
    # the train split changed, so `curriculum` reruns
    assert reproduce(pipeline_repo) == ["prepare", "curriculum"]


def test_later_stage_param_edit_does_not_rerun_prepare(pipeline_repo):
    reproduce(pipeline_repo)
    edit_params(pipeline_repo, {"index": {"faiss_type": "hnsw"}})
    assert reproduce(pipeline_repo) == ["index"]


def test_pipeline_params_edit_does_not_rerun_prepare(pipeline_repo):
    # `pipeline` params belong to the Prefect deployment, not to any DVC stage.
    reproduce(pipeline_repo)
    edit_params(pipeline_repo, {"pipeline": {"cron": "0 3 * * *"}})
    assert reproduce(pipeline_repo) == []


def test_flow_runs_under_prefect_harness(pipeline_repo):
    from flows.pipeline import pipeline

    with prefect_harness():
        result = pipeline(str(pipeline_repo), ["index"])
        assert result == {"prepare": True, "index": True}
        assert pipeline(str(pipeline_repo), ["index"]) == {"prepare": False, "index": False}
    assert (pipeline_repo / "data" / "passages.parquet").exists()


def test_every_temporary_prefect_server_gets_one_startup_limit(repo_root, monkeypatch):
    """The harness waits as long as a flow's own ephemeral server, the setting
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS (which saw the environment), not its own 30 s;
    no test starts it otherwise."""
    import ast
    import os

    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS
    from prefect.testing import utilities

    env = os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]
    assert PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value() == int(env)
    calls = []
    monkeypatch.setattr(utilities, "prefect_test_harness", lambda **kw: calls.append(kw))
    prefect_harness()
    assert calls == [{"server_startup_timeout": None}]  # None: the harness reads the setting

    def harness_calls(path):
        return [node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", ""))
                == "prefect_test_harness"]

    tests = [*(repo_root / "tests").rglob("*.py"), *(repo_root / "src/factrl/testing").rglob("*.py")]
    callers = sorted(str(p.relative_to(repo_root)) for p in tests if harness_calls(p))
    assert callers == ["src/factrl/testing/prefect_harness.py"]
