"""Train with verl: factrl's rows as verl's dataset, its GRPO params as verl's Hydra overrides,
verl's checkpoints and logs back as the stage's Hugging Face model and curve.

``python -m verl.trainer.main_ppo <overrides>`` trains on a Ray GPU cluster (vLLM or SGLang
rollouts, FSDP actor). This module holds what does not depend on the method being trained:

* :func:`verl_row` / :func:`write_dataset`: rows in the layout ``RLHFDataset`` reads (``data_source``,
  ``prompt`` chat messages, ``ability``, ``reward_model{style, ground_truth}``, ``agent_name``,
  ``extra_info{index, tools_kwargs, need_tools_kwargs, ...}``).
* :func:`write_tool_config` / :func:`write_agent_loop_config`: the YAML files verl loads its tools
  and agent loops from (``multi_turn.tool_config_path``, ``agent.agent_loop_config_path``).
* :func:`check_grpo`: the GRPO settings verl cannot run, refused naming their params keys.
* :func:`grpo_overrides`: a run's :class:`~factrl.rl.params.GRPOParams` (an agent's
  :class:`~factrl.rl.params.AgentTrainParams`, or ``train_march``'s section) and the cluster's
  :class:`~factrl.rl.params.VerlParams` as Hydra overrides of verl's ``ppo_trainer`` config;
  :func:`compose` composes them with verl's own config files (what ``main_ppo`` would run) and
  :func:`main_ppo_command` is the command line.
* :func:`latest_checkpoint` / :func:`merge_checkpoint`: the newest ``global_step_N/actor`` (FSDP
  shards) merged into a Hugging Face directory with verl's model merger.
* :func:`metrics_rows`: verl's file-logger lines as rows of factrl's training curves.

Nothing here imports verl at module level: the overrides and the command are plain data, and the
functions that need verl import it when called.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from factrl.io import atomic_path
from factrl.rl.params import GRPOParams, VerlParams

MAIN_PPO = ("-m", "verl.trainer.main_ppo")
LOG_FILE_ENV = "VERL_FILE_LOGGER_PATH"  # verl's "file" logger writes its jsonl here
LATEST = "latest_checkpointed_iteration.txt"
NO_LIMIT = 1.0e9  # verl has no "off" for dual-clip and gradient clipping: a bound never reached
EPOCHS = 1000  # verl stops at trainer.total_training_steps; the epoch count only must not stop it first

# verl's step metrics -> factrl's curve columns (factrl.rl.curves reads these names)
METRIC_NAMES = {
    "critic/score/mean": "reward_mean",
    "critic/score/std": "reward_std",
    "actor/kl_loss": "kl",
    "actor/entropy": "entropy",
    "actor/pg_loss": "pg_loss",
    "actor/grad_norm": "grad_norm",
    "response_length/mean": "response_length",
    "timing_s/step": "step_time",
}


# --------------------------------------------------------------------------------------------
# dataset
# --------------------------------------------------------------------------------------------


def verl_row(*, index: int, data_source: str, agent_name: str, messages: Sequence[Mapping[str, str]],
             ground_truth: str, ability: str, reward_style: str, tool_name: str | None = None,
             create_kwargs: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None) -> dict:
    """One ``RLHFDataset`` row. ``data_source`` names the reward, ``agent_name`` the agent loop;
    ``tool_name`` gets ``create_kwargs`` in ``extra_info.tools_kwargs`` (verl hands them to the tool
    when the trajectory calls it)."""
    # a row without a tool has no tools_kwargs at all: Parquet cannot store a struct with no field
    tools = {"tools_kwargs": {tool_name: {"create_kwargs": dict(create_kwargs or {})}}} if tool_name else {}
    return {
        "data_source": data_source,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in messages],
        "ability": ability,
        "reward_model": {"style": reward_style, "ground_truth": ground_truth},
        "agent_name": agent_name,
        "extra_info": {"index": int(index), **tools, "need_tools_kwargs": False, **dict(extra or {})},
    }


def check_rows(rows: Sequence[dict], source: str, *, tokenizer=None, max_prompt_length: int | None = None) -> None:
    """Refuse rows verl would fail on later, naming ``source``, the row and the field: an empty
    ground truth, no prompt, a prompt longer than ``max_prompt_length`` tokens."""
    from factrl.llm.tokens import encode_chat

    if not rows:
        raise ValueError(f"{source}: no rows to train on")
    for i, row in enumerate(rows):
        if not row["prompt"]:
            raise ValueError(f"{source}, row {i}, field 'prompt': empty")
        truth = row["reward_model"]["ground_truth"]
        if truth is None or not str(truth).strip():
            raise ValueError(f"{source}, row {i}, field 'reward_model.ground_truth': empty")
        if tokenizer is not None and max_prompt_length is not None:
            n = len(encode_chat(tokenizer, row["prompt"]))
            if n > max_prompt_length:
                raise ValueError(f"{source}, row {i}, field 'prompt': {n} tokens, more than train.verl."
                                 f"max_prompt_length = {max_prompt_length}")


def write_dataset(rows: Sequence[dict], path: str | Path) -> Path:
    """Write the rows as Parquet (atomically), the file ``data.train_files`` names."""
    table = pa.Table.from_pylist(list(rows))
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def write_tool_config(tools: Sequence[tuple[str, Mapping[str, Any]]], path: str | Path) -> Path:
    """verl's tool config: ``(class path, config)`` per tool (native ``BaseTool`` subclasses whose
    schema the class provides)."""
    body = {"tools": [{"class_name": cls, "config": {"type": "native", **dict(cfg)}} for cls, cfg in tools]}
    return _write_yaml(body, path)


def write_agent_loop_config(loops: Mapping[str, tuple[str, Mapping[str, Any]]], path: str | Path) -> Path:
    """verl's agent-loop config: ``name -> (class path, constructor kwargs)``. Workers read it, so
    the loops are found even where the module registering them was never imported."""
    body = [{"name": name, "_target_": cls, **dict(kwargs)} for name, (cls, kwargs) in loops.items()]
    return _write_yaml(body, path)


def _write_yaml(body: Any, path: str | Path) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    return Path(path)


# --------------------------------------------------------------------------------------------
# overrides and the command
# --------------------------------------------------------------------------------------------


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar (strings quoted unless plainly safe)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    # bare only when Hydra reads it back as this very string (not a number, bool or null)
    if re.fullmatch(r"[A-Za-z/][\w./+:@-]*", text) and text.lower() not in ("true", "false", "null", "nan", "inf"):
        return text
    # inside quotes only a quote and the backslashes right before it (or at the end) are escaped
    escaped = re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\" + m.group(2) if m.group(2) else ""), text)
    return "'" + escaped + "'"


def overrides_from(mapping: Mapping[str, Any]) -> list[str]:
    """``{"a.b": 1, "+c.d": "x"}`` -> ``["a.b=1", "+c.d=x"]``."""
    return [f"{key}={hydra_value(value)}" for key, value in mapping.items()]


def check_grpo(cfg: GRPOParams, cluster: VerlParams, *, section: str = "train.<agent>",
               cluster_section: str = "train.verl", backend_key: str = "train.backend") -> None:
    """Refuse the settings verl 0.9's ``main_ppo`` cannot run, with errors naming their params keys
    (``section``: where ``cfg`` lives, ``cluster_section``: where ``cluster`` lives). A stage calls it
    when it starts; :func:`grpo_overrides` calls it again."""
    group = cfg.group_size
    trajectories = cfg.mini_batch_size or cfg.prompts_per_step * group
    if trajectories % group:
        raise ValueError(f"mini_batch_size {cfg.mini_batch_size} is not a multiple of group_size {group}: "
                         "verl updates on whole groups")
    if cfg.dynamic_sampling:  # verl 0.9's main_ppo (its v0 trainer) never reads algorithm.filter_groups
        raise ValueError(f"dynamic_sampling is not available on {backend_key} verl: verl 0.9's main_ppo "
                         "trainer ignores algorithm.filter_groups (only its experimental v1 trainer reads "
                         f"it); set {section}.dynamic_sampling false or use the local backend")
    if cfg.skip_uniform_prompts:  # a pre-rollout filter on verl's data loader is not in verl 0.9
        raise ValueError(f"skip_uniform_prompts is not available on {backend_key} verl: verl 0.9 has no "
                         f"pre-rollout prompt filter; set {section}.skip_uniform_prompts false or use the local "
                         "backend")
    if cfg.max_context_tokens <= cluster.max_prompt_length:
        raise ValueError(f"{section}.max_context_tokens {cfg.max_context_tokens} leaves no response budget "
                         f"after {cluster_section}.max_prompt_length {cluster.max_prompt_length}")


def grpo_overrides(cfg: GRPOParams, cluster: VerlParams, *, model_path: str, train_file: str, agent_name: str,
                   tool_config: str, agent_loop_config: str, state_dir: str, experiment: str,
                   reward_function: str, reward_kwargs: Mapping[str, Any] | None = None,
                   device: str = "cuda", section: str = "train.<agent>") -> list[str]:
    """verl's ``ppo_trainer`` overrides for GRPO of one agent: the same group size, learning rate,
    KL loss, clipping, loss aggregation, lengths and tool-call limit as the local trainer's run of
    ``cfg``, on the cluster ``cluster``; then ``cluster.extra_overrides``. ``section``: where ``cfg``
    lives in params.yaml, named by :func:`check_grpo`'s errors."""
    check_grpo(cfg, cluster, section=section)
    group = cfg.group_size
    trajectories = cfg.mini_batch_size or cfg.prompts_per_step * group
    response_length = cfg.max_context_tokens - cluster.max_prompt_length
    turns = getattr(cfg, "max_turns", 0)  # tool calls per rollout; a method without tools (MARCH) has none
    actor = "actor_rollout_ref.actor"
    rollout = "actor_rollout_ref.rollout"
    values: dict[str, Any] = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": cfg.norm_adv_by_std,
        "algorithm.use_kl_in_reward": False,
        "data.train_files": [train_file],
        "data.val_files": [train_file],
        "data.train_batch_size": cfg.prompts_per_step,
        "data.max_prompt_length": cluster.max_prompt_length,
        "data.max_response_length": response_length,
        "data.truncation": "error",
        "data.return_raw_chat": True,
        "data.seed": cfg.seed,
        "actor_rollout_ref.model.path": model_path,
        # LoRA (0 = off): verl's hf_model config reads the same three settings as factrl.rl.lora
        "actor_rollout_ref.model.lora_rank": cfg.lora_rank,
        "actor_rollout_ref.model.lora_alpha": cfg.lora_alpha,
        "actor_rollout_ref.model.target_modules": (cfg.lora_targets if cfg.lora_targets == "all-linear"
                                                   else [t.strip() for t in cfg.lora_targets.split(",")]),
        f"{actor}.optim.lr": cfg.lr,
        f"{actor}.optim.weight_decay": cfg.weight_decay,
        f"{actor}.optim.betas": list(cfg.betas),
        f"{actor}.optim.lr_warmup_steps": cfg.warmup_steps or -1,
        f"{actor}.optim.clip_grad": cfg.max_grad_norm or NO_LIMIT,
        f"{actor}.ppo_mini_batch_size": trajectories // group,
        f"{actor}.ppo_micro_batch_size_per_gpu": cfg.micro_batch_size,
        f"{actor}.ppo_epochs": cfg.ppo_epochs,
        f"{actor}.clip_ratio_low": cfg.clip_ratio_low,
        f"{actor}.clip_ratio_high": cfg.clip_ratio_high,
        f"{actor}.clip_ratio_c": cfg.clip_ratio_c if cfg.clip_ratio_c is not None else NO_LIMIT,
        f"{actor}.loss_agg_mode": cfg.loss_agg,
        f"{actor}.entropy_coeff": cfg.entropy_coef,
        # the engine/trainer gap corrected as the local trainer does (GRPOParams.tis_cap)
        "algorithm.rollout_correction.rollout_is": "token" if cfg.tis_cap > 0 else None,
        "algorithm.rollout_correction.rollout_is_threshold": cfg.tis_cap if cfg.tis_cap > 0 else 2.0,
        f"{actor}.use_kl_loss": cfg.kl_coef > 0,
        f"{actor}.kl_loss_coef": cfg.kl_coef,
        f"{actor}.kl_loss_type": cfg.kl_type,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": cfg.micro_batch_size,
        f"{rollout}.name": cluster.rollout_engine,
        f"{rollout}.n": group,
        f"{rollout}.temperature": cfg.temperature,
        f"{rollout}.top_p": 1.0,
        f"{rollout}.tensor_model_parallel_size": cluster.tensor_parallel_size,
        f"{rollout}.gpu_memory_utilization": cluster.gpu_memory_utilization,
        f"{rollout}.log_prob_micro_batch_size_per_gpu": cfg.micro_batch_size,
        f"{rollout}.calculate_log_probs": cfg.tis_cap > 0,
        f"{rollout}.multi_turn.enable": True,
        f"{rollout}.multi_turn.max_user_turns": turns,
        f"{rollout}.multi_turn.max_assistant_turns": turns + 1,
        f"{rollout}.multi_turn.tool_config_path": tool_config,
        f"{rollout}.agent.agent_loop_config_path": agent_loop_config,
        f"{rollout}.agent.default_agent_loop": agent_name,
        "reward.custom_reward_function.path": reward_function,
        "reward.custom_reward_function.name": "compute_score",
        **{f"+reward.custom_reward_function.reward_kwargs.{k}": v for k, v in (reward_kwargs or {}).items()},
        "trainer.device": device,
        "trainer.n_gpus_per_node": cluster.n_gpus_per_node,
        "trainer.nnodes": cluster.nnodes,
        "trainer.total_training_steps": cfg.steps,
        "trainer.total_epochs": EPOCHS,
        "trainer.save_freq": cfg.checkpoint_every,
        "trainer.max_actor_ckpt_to_keep": cfg.keep_checkpoints,
        "trainer.default_local_dir": state_dir,
        "trainer.resume_mode": "auto",
        "trainer.val_before_train": False,
        "trainer.test_freq": -1,
        "trainer.logger": ["console", "file"],
        "trainer.project_name": "factrl",
        "trainer.experiment_name": experiment,
    }
    if cfg.balance_by:  # the rows are written in the local trainer's balanced draw order (verl_run.step_rows)
        values["data.shuffle"] = False
    if cluster.ray_address:
        values["+ray_kwargs.ray_init.address"] = cluster.ray_address
    return overrides_from(values) + list(cluster.extra_overrides)


def config_dir() -> Path:
    """verl's Hydra config directory (``verl/trainer/config``) of the installed verl."""
    import verl

    return Path(verl.__file__).parent / "trainer" / "config"


def compose(overrides: Sequence[str]):
    """verl's ``ppo_trainer`` config with ``overrides``, as ``main_ppo`` composes it (Hydra raises on
    an unknown key or a malformed value)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        return hydra_compose("ppo_trainer", overrides=list(overrides))


def main_ppo_command(overrides: Sequence[str], python: str = sys.executable) -> list[str]:
    """``python -m verl.trainer.main_ppo <overrides>`` as an argument list."""
    return [python, *MAIN_PPO, *overrides]


def shell_line(command: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """A command (and the environment it needs) as one copy-pasteable shell line."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + shlex.join(command)


# --------------------------------------------------------------------------------------------
# checkpoints and metrics
# --------------------------------------------------------------------------------------------


def latest_checkpoint(local_dir: str | Path) -> Path | None:
    """The actor directory of verl's newest complete checkpoint (``global_step_N/actor``, N read
    from ``latest_checkpointed_iteration.txt``, which verl writes after the checkpoint), or None."""
    local_dir = Path(local_dir)
    marker = local_dir / LATEST
    if not marker.is_file():
        return None
    actor = local_dir / f"global_step_{int(marker.read_text().strip())}" / "actor"
    return actor if actor.is_dir() else None


def merge_checkpoint(actor_dir: str | Path, target_dir: str | Path) -> Path:
    """Merge verl's FSDP shards in ``actor_dir`` into a Hugging Face model in ``target_dir``
    (verl's ``model_merger``, what ``python -m verl.model_merger merge --backend fsdp`` runs)."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    actor_dir = Path(actor_dir)
    config = ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(actor_dir),
                               target_dir=str(target_dir), hf_model_config_path=str(actor_dir / "huggingface"))
    merger = FSDPModelMerger(config)
    merger.merge_and_save()
    merger.cleanup()
    return Path(target_dir)


def metrics_rows(lines: Iterable[str]) -> list[dict[str, float]]:
    """verl's file-logger lines (``{"step": N, "data": {metric: value}}``) as factrl curve rows:
    ``step`` plus the columns of :data:`METRIC_NAMES` that the step logged. A later line for a
    step (after a resume) replaces the earlier one."""
    by_step: dict[int, dict[str, float]] = {}
    for line in lines:
        if not line.strip():
            continue
        entry = json.loads(line)
        data = entry.get("data", {})
        row: dict[str, float] = {"step": int(entry["step"])}
        for name, column in METRIC_NAMES.items():
            value = data.get(name)
            if isinstance(value, (int, float)) and math.isfinite(value):
                row[column] = float(value)
        by_step[row["step"]] = row
    return [by_step[k] for k in sorted(by_step)]
