"""One HARIS round trained on verl (``train.backend: verl``): the same stages, files and params as
the local trainer, run by ``python -m verl.trainer.main_ppo`` on a Ray GPU cluster.

For ``train_search@r`` / ``train_reason@r``:

1. :func:`plan` decides everything from params, with no side effect (``factrl train --dry-run``
   prints it): the work directory (``checkpoints/<agent>_r<id>``, DVC ``persist``), the rows file,
   the tool and agent-loop configs, the servers the tools reach, and the Hydra overrides
   (``factrl.rl.verl_backend.grpo_overrides``).
2. :func:`factrl.rl.verl_run.export` writes the round's prompts as verl rows (``factrl.recipes.haris.verl_loops`` loops and
   rewards), checked against the prompt budget with the policy's tokenizer.
3. :func:`factrl.rl.verl_run.run` starts the servers the plan names (``factrl serve-retriever`` on
   ``index/``; for the reasoning agent L_r on its own ``vllm serve`` through ``factrl serve-agent``,
   as the paper serves it), runs ``main_ppo`` (which resumes from its own checkpoints after a kill),
   merges verl's last checkpoint into ``models/<agent>_<r>`` (Hugging Face format, atomically) and
   turns verl's metrics into ``metrics/train/<agent>_r<id>/`` (DVCLive). DVC's graph does not change.

The plan and the run are generic (:mod:`factrl.rl.verl_run`, which MARCH's verl recipe uses too);
this module holds what is HARIS's: the two agents' specs, their rows and their plans.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from factrl.agents import haris
from factrl.agents import registry as agent_registry
from factrl.model_names import RoundParams
from factrl.recipes.haris import rounds as haris_rounds
from factrl.recipes.haris.params import TrainParams
from factrl.rl import verl_backend
from factrl.rl.params import AgentTrainParams
from factrl.rl.runs import RunResult, summary_line
from factrl.rl.verl_run import Server, VerlPlan, main_ppo_env, run
from factrl.servers import reachable_host

REWARD_MODULE = "pkg://factrl.recipes.haris.verl_loops"
MESSAGES = {"reasoning": haris.reasoning_messages, "search": haris.search_messages}  # a row's prompt, by role


# RolloutParams fields a verl loop or tool takes from factrl's params (the rest are the agents' own)
ROLLOUT_FIELDS = ("max_turns", "max_new_tokens", "max_context_tokens", "max_tool_response_tokens", "temperature")


def _rollout_fields(params) -> dict[str, Any]:
    return {name: getattr(params, name) for name in ROLLOUT_FIELDS}


def plan(agent: str, rnd: RoundParams, train: TrainParams, *, index_dir: str | Path = "index",
         models_dir: str | Path = "models", checkpoints_dir: str | Path = "checkpoints",
         metrics_dir: str | Path = "metrics/train", device: str = "cuda") -> VerlPlan:
    """The verl run of ``agent`` (``search`` | ``reason``) in round ``rnd`` (paths absolute: Ray
    workers run elsewhere)."""
    from factrl.llm.vllm import base_url, serve_agent_command, served_name

    spec, cluster = agent_registry.agent(agent), train.verl
    form = spec.verl
    models_dir, index_dir = Path(models_dir).resolve(), Path(index_dir).resolve()
    cfg: AgentTrainParams = spec.train_params(train)
    section = spec.params_key  # where cfg lives, for errors
    work_dir = spec.state_dir(rnd.id, checkpoints_dir).resolve()
    host = reachable_host(cluster.serve_host)
    servers: list[Server] = []
    retriever_url = cluster.retriever_url
    if not retriever_url:
        retriever_url = f"http://{host}:{cluster.retriever_port}"
        servers.append(Server("factrl serve-retriever", [
            sys.executable, "-m", "factrl.cli", "serve-retriever", "--index", str(index_dir), "--mode",
            cfg.retrieval_mode, "--host", cluster.serve_host, "--port", str(cluster.retriever_port)],
            f"{retriever_url}/health", log="retriever.log"))
    tool_config = {"name": form.tool, "retriever_url": retriever_url, "top_k": cfg.top_k}
    search_model = None
    if agent == "search":
        rollout = _rollout_fields(haris_rounds.search_rollout_params(cfg))
        reward_kwargs = {"judge": cfg.judge, "judge_threshold": cfg.judge_threshold, "judge_model": cfg.judge_model}
    else:
        search_model = str(models_dir / f"search_{rnd.id}")
        endpoint = cluster.search_agent_url
        if not endpoint:
            endpoint = base_url(cluster.serve_host, cluster.search_agent_port)
            command = serve_agent_command(search_model, host=cluster.serve_host, port=cluster.search_agent_port,
                                          max_model_len=cfg.max_context_tokens,
                                          gpu_memory_utilization=cluster.search_agent_memory or None)
            gpus = {"CUDA_VISIBLE_DEVICES": cluster.search_agent_gpus} if cluster.search_agent_gpus else {}
            servers.append(Server("L_r behind vllm serve (factrl serve-agent)", command, f"{endpoint}/models", gpus,
                                  log="search_agent.log"))
        tool_config |= {"model": served_name(search_model), "base_url": endpoint,
                        "rollout": _rollout_fields(haris_rounds.served_search_params(cfg))}
        rollout = _rollout_fields(haris_rounds.reasoning_rollout_params(cfg))
        if cfg.hop_reward:  # compute_score sees one row's label, not the claim's gold chain
            raise ValueError(f"hop_reward ({cfg.hop_reward}) is not available on train.backend verl: verl's reward "
                             "hook gets no gold hop answers; set train.reasoning.hop_reward 0 or use the local backend")
        reward_kwargs = {"require_question": cfg.require_question}
    init_model = str(models_dir / f"{spec.name}_{rnd.prev}")
    p = VerlPlan(
        stage=f"{spec.train_stage}@{rnd.id}", agent=agent, cfg=cfg, init_model=init_model,
        out_model=models_dir / f"{spec.name}_{rnd.id}",
        curves_dir=spec.curves_dir(rnd.id, metrics_dir).resolve(), work_dir=work_dir,
        tools=[(form.tool_class, tool_config)], loops={form.loop: (form.loop_class, {"rollout": rollout})},
        overrides=[], servers=servers, env={}, make_rows=functools.partial(agent_rows, agent),
        search_model=search_model)
    p.overrides = verl_backend.grpo_overrides(
        cfg, cluster, model_path=init_model, train_file=str(p.train_file), agent_name=form.loop,
        tool_config=str(p.tool_config), agent_loop_config=str(p.agent_loop_config),
        state_dir=str(work_dir / "verl"), experiment=f"{spec.name}_r{rnd.id}", reward_function=REWARD_MODULE,
        reward_kwargs=reward_kwargs, device=device, section=section)
    p.env = main_ppo_env(work_dir, cluster)
    return p


# --------------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------------


def agent_rows(agent: str, items: list[dict]) -> list[dict]:
    """verl rows of an agent's prompts: the search agent's (``id``, ``question``, ``answer``) or the
    reasoning agent's (``id``, ``claim``, ``label``)."""
    spec = agent_registry.agent(agent)
    form, messages = spec.verl, MESSAGES[spec.role]
    return [verl_backend.verl_row(
        index=i, data_source=form.loop, agent_name=form.loop, messages=messages(it[spec.prompt_key]),
        ground_truth=it[spec.truth_key], ability=form.ability, reward_style=form.reward_style, tool_name=form.tool,
        create_kwargs={"row_id": str(it["id"])},
        extra={"id": str(it["id"]), spec.prompt_key: it[spec.prompt_key],
               **{k: it[k] for k in form.reward_keys if it.get(k) is not None}})
        for i, it in enumerate(items)]


def train(agent: str, rnd: RoundParams, train_params: TrainParams, items: list[dict]) -> RunResult:
    """A stage's run on verl: :func:`plan`, then :func:`factrl.rl.verl_run.run`, then the stage's
    summary line."""
    p = plan(agent, rnd, train_params)
    result = run(p, items)
    print(summary_line(p.stage, result))
    return result
