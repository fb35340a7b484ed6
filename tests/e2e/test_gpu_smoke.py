"""`make test-gpu`'s pipeline run: profiles/paper.yaml (GRPO G 5, lr 1e-6, KL 0.001, temperature 1,
four tool calls, the LLM judge, L_r behind its own server) with the sizes cut to minutes and every
model stage on the GPU (`device: cuda` in index, synthesize, its teacher, train and evaluate),
through `dvc repro`. The teacher is the local model: the paper's GPT-4o needs an API key.

Skips without CUDA (tests/conftest.py); ``run_paper_smoke(..., device="cpu")`` runs the same on a CPU.
"""

from __future__ import annotations

import contextlib
import json

import pytest

# the pipeline needs DVC, Prefect and every stage's packages: not on a bare CUDA machine (`make test-gpu-bare`)
pytest.importorskip("dvc", reason="the pipeline smoke test needs DVC and factrl's other packages; a bare "
                                  "CUDA machine runs `make test-gpu-bare` instead")
import yaml  # noqa: E402
from dvc.repo import Repo  # noqa: E402

from factrl.profiles import merge  # noqa: E402
from factrl.rl.step_log import read_history  # noqa: E402
from factrl.testing.pipeline_repo import make_pipeline_repo  # noqa: E402

SIZES = {  # what the paper profile runs at, cut down; everything else is the paper's
    "prepare": {"world": {"seed": 4, "num_passages": 100, "num_claims": 40, "hops": [2]}},
    "index": {"embedder": "minilm", "chunk_size": 64},
    "curriculum": {"segments": 1},
    "rounds": {"1": {"prev": 0, "segment": "all", "questions": "first"},
               "2": {"prev": 1, "segment": "seg1", "questions": "all"}},
    "synthesize": {"teacher": {"backend": "server", "model": "smollm2-135m", "max_tokens": 24},
                   "max_claims": 3, "batch_size": 3, "concurrency": 1, "rollout_max_tokens": 24},
    "train": {agent: {"prompts_per_step": 1, "steps": 1, "max_prompts": 2, "max_new_tokens": 16,
                      "max_context_tokens": 2048, "max_tool_response_tokens": 48, "checkpoint_every": 1}
              for agent in ("search", "reasoning")},
    "evaluate": {"sets": [{"name": "demo", "path": "data/claims/eval.parquet"}], "per_hop": 2, "systems": ["haris"],
                 "max_new_tokens": 16, "max_turns": 2, "n_boot": 50, "trace_claims": 1},
}


def paper_smoke_params(repo_root, device: str) -> dict:
    """The params edit: the paper profile, :data:`SIZES`, and ``device`` for every model stage."""
    params = yaml.safe_load((repo_root / "profiles" / "paper.yaml").read_text())
    params.pop("rounds")  # the paper's four rounds: the smoke run keeps two (evaluate reads round 2)
    merge(params, yaml.safe_load(yaml.safe_dump(SIZES)))
    params["train"]["reasoning"]["search_max_new_tokens"] = 16
    for section in (params["index"], params["synthesize"], params["synthesize"]["teacher"], params["evaluate"],
                    params["train"]["search"], params["train"]["reasoning"]):
        section["device"] = device
    return params


def run_paper_smoke(tmp_path, repo_root, device: str) -> None:
    repo = make_pipeline_repo(repo_root, tmp_path / "repo", paper_smoke_params(repo_root, device))
    with contextlib.chdir(repo), Repo(str(repo)) as dvc:
        ran = [s.addressing for s in dvc.reproduce()]
    assert {"train_search@2", "train_reason@2", "evaluate"} <= set(ran)
    for agent in ("search", "reason"):
        info = json.loads((repo / "models" / f"{agent}_2" / "factrl_train.json").read_text())
        if info.get("steps"):
            assert info["hardware"]["device"].startswith(device)
            assert info["memory_bytes"]["reference"] > 0  # the paper's KL 0.001 keeps a reference model
            row = read_history(repo / "metrics" / "train" / f"{agent}_r2")[0]  # the run's DVCLive curves
            assert "rollout_logp_gap" in row and (device == "cpu" or float(row["cuda_peak_gib"]) > 0)
    assert "demo" in json.loads((repo / "metrics" / "eval.json").read_text())


@pytest.mark.gpu
@pytest.mark.slow
def test_paper_profile_smoke_on_cuda(tmp_path, repo_root):
    run_paper_smoke(tmp_path, repo_root, "cuda")
