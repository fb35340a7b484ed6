"""A stand-in for ``python -m verl.trainer.main_ppo`` on CPU (verl's trainer needs CUDA): reads the
Hydra overrides it is given, checks what the stage prepared (rows, tool config, a live retriever),
and writes what verl would: an FSDP-layout checkpoint of the initial model (world size 1) under
trainer.default_local_dir, ``latest_checkpointed_iteration.txt``, and the file logger's metrics."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(argv: list[str]) -> None:
    overrides = dict(a.split("=", 1) for a in argv)
    steps = int(overrides["trainer.total_training_steps"])
    rows = pq.read_table(overrides["data.train_files"].strip("[]")).to_pylist()
    rollout = "actor_rollout_ref.rollout"
    assert rows and all(r["agent_name"] == overrides[f"{rollout}.agent.default_agent_loop"] for r in rows)
    tools = yaml.safe_load(Path(overrides[f"{rollout}.multi_turn.tool_config_path"]).read_text())["tools"]
    for tool in tools:  # a method without tools (MARCH) has none
        with urllib.request.urlopen(tool["config"]["retriever_url"] + "/health", timeout=10) as resp:  # up now
            assert json.load(resp)["status"] == "ok"
    loops = yaml.safe_load(Path(overrides[f"{rollout}.agent.agent_loop_config_path"]).read_text())
    assert overrides[f"{rollout}.agent.default_agent_loop"] in {loop["name"] for loop in loops}
    model_path = overrides["actor_rollout_ref.model.path"]
    model, tok = AutoModelForCausalLM.from_pretrained(model_path), AutoTokenizer.from_pretrained(model_path)
    with torch.no_grad():  # "training" moves the weights
        next(model.parameters()).add_(1.0)
    actor = Path(overrides["trainer.default_local_dir"]) / f"global_step_{steps}" / "actor"
    actor.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    model.config.save_pretrained(actor / "huggingface")
    tok.save_pretrained(actor / "huggingface")
    (actor.parent.parent / "latest_checkpointed_iteration.txt").write_text(str(steps))
    with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as f:
        for step in range(1, steps + 1):
            f.write(json.dumps({"step": step, "data": {"critic/score/mean": step / 10, "actor/kl_loss": 0.0}}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
