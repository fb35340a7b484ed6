"""Stage `warmup` on a tiny demo world, with a tiny random Llama (SmolLM2's tokenizer) as the base
model: on, both agents are fine-tuned on the world's references and keep the short prompt; off,
both are the base model as it is."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from factrl.data.schemas import REFERENCES, REFERENCES_REJECTED, validate
from factrl.rl.step_log import read_history, read_summary
from tests.rl.tiny import tiny_model, tokenizer


@pytest.fixture
def stage_dir(tmp_path, monkeypatch):
    """A working directory holding data/claims/warm.parquet, index/ (BM25) and a tiny base model."""
    from factrl.data.params import WorldParams
    from factrl.data.world import write_world
    from factrl.retrieval.index import build_index

    (tmp_path / "data" / "claims").mkdir(parents=True)
    write_world(WorldParams(seed=2, num_passages=200, num_claims=12, hops=(2, 3)), tmp_path / "data" / "passages.parquet",
                tmp_path / "data" / "claims" / "warm.parquet")
    build_index(tmp_path / "data" / "passages.parquet", tmp_path / "index", embedder=None)
    tok = tokenizer()
    tiny_model(tok).save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _params(stage_dir, **warmup) -> str:
    sft = {"max_steps": 2, "batch_size": 2, "lr": 1e-3, "checkpoint_every": 1}
    section = {"enabled": True, "base_model": str(stage_dir / "base"), "retrieval_mode": "bm25", "max_claims": 4,
               "precision": "fp32", "reasoning": sft, "search": sft} | warmup
    (stage_dir / "params.yaml").write_text(yaml.safe_dump({"warmup": section}))
    return "params.yaml"


def _config(model_dir) -> dict:
    return json.loads((model_dir / "config.json").read_text())


def test_warmup_fine_tunes_both_agents_and_reports_it(stage_dir):
    from stages.warmup import main

    summary = main(_params(stage_dir))
    refs = validate(pq.read_table("warmup/references.parquet"), REFERENCES, "references")
    rejected = validate(pq.read_table("warmup/rejected.parquet"), REFERENCES_REJECTED, "rejected")
    agents = refs.column("agent").to_pylist()
    assert agents.count("reasoning") == 4 and agents.count("search") >= 8  # 4 claims of 2-3 hops
    assert summary["references"] == {"reasoning": 4, "search": agents.count("search")}
    assert summary["rejected"]["total"] == rejected.num_rows
    assert json.loads((stage_dir / "warmup" / "summary.json").read_text())["sft"] == summary["sft"]
    for agent, name in (("reasoning", "reason_0"), ("search", "search_0")):
        sft = summary["sft"][agent]
        assert sft["steps"] == 2 and sft["examples"] == agents.count(agent) and sft["precision"] == "fp32"
        assert sft["tokens"] > 0 and sft["tokens_per_s"] > 0 and sft["wall_s"] > 0
        assert sft["final_loss"] is not None and sft["first_loss"] is not None
        curves = stage_dir / "warmup" / f"loss_{agent}"  # the DVCLive directory dvc.yaml's plots name
        assert [r["step"] for r in read_history(curves)] == [1, 2]
        assert read_summary(curves)["loss"] == sft["final_loss"] and read_summary(curves)["step"] == 2
        model_dir = stage_dir / "models" / name
        assert _config(model_dir)["factrl_prompt"] == "short"
        info = json.loads((model_dir / "factrl_train.json").read_text())
        assert info["warm_start"] and info["agent"] == agent and info["steps"] == 2
    assert summary["wall_s"] > 0 and summary["hardware"]["precision"] == "fp32"
    assert (stage_dir / "checkpoints" / "warmup").is_dir()


def test_warmup_off_leaves_the_base_model(stage_dir):
    from stages.warmup import main

    summary = main(_params(stage_dir, enabled=False))
    assert summary.pop("wall_s") >= 0 and summary == {"enabled": False, "base_model": str(stage_dir / "base")}
    for name in ("reason_0", "search_0"):
        assert "factrl_prompt" not in _config(stage_dir / "models" / name)  # prompted as the base model
    assert pq.read_metadata("warmup/references.parquet").num_rows == 0
    assert (stage_dir / "checkpoints" / "warmup").is_dir() and (stage_dir / "warmup" / "loss_search" / "plots" / "metrics").is_dir()


def test_world_source_without_gold_chains_says_what_to_use(stage_dir):
    import pyarrow as pa

    from stages.warmup import main

    path = stage_dir / "data" / "claims" / "warm.parquet"
    table = pq.read_table(path)
    i = table.schema.get_field_index("hops")
    pq.write_table(table.set_column(i, "hops", pa.nulls(table.num_rows, table.schema.field(i).type)), path)
    with pytest.raises(ValueError, match="gave no reasoning or search reference .* use 'teacher'"):
        main(_params(stage_dir))
