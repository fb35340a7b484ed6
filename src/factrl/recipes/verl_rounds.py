"""One HARIS round trained on verl (``train.backend: verl``): the same stages, files and params as
the local trainer, run by ``python -m verl.trainer.main_ppo`` on a Ray GPU cluster.

For ``train_search@r`` / ``train_reason@r``:

1. :func:`plan` decides everything from params, with no side effect (``factrl train --dry-run``
   prints it): the work directory (``checkpoints/<agent>_r<id>``, DVC ``persist``), the rows file,
   the tool and agent-loop configs, the servers the tools reach, and the Hydra overrides
   (``factrl.rl.verl_backend.grpo_overrides``).
2. :func:`export` writes the round's prompts as verl rows (``factrl.recipes.haris_verl`` loops and
   rewards), checked against the prompt budget with the policy's tokenizer.
3. :func:`run` starts the servers (``factrl serve-retriever`` on ``index/``; for the reasoning
   agent L_r on its own ``vllm serve`` through ``factrl serve-agent``, as the paper serves it),
   runs ``main_ppo`` (which resumes from its own checkpoints after a kill), merges verl's last
   checkpoint into ``models/<agent>_<r>`` (Hugging Face format, atomically) and turns verl's
   metrics into ``metrics/train/<agent>_r<id>.csv``. DVC's graph does not change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from factrl.agents import haris
from factrl.config import AgentTrainParams, GRPOParams, RoundParams, TrainParams, VerlParams
from factrl.recipes import haris_rounds
from factrl.recipes.haris_verl import REASONING, SEARCH
from factrl.rl import verl_backend
from factrl.servers import reachable_host

REWARD_MODULE = "pkg://factrl.recipes.haris_verl"


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """What an agent is on verl: its agent loop (also its reward's name, the rows' ``data_source``),
    its tool, and how an item becomes a row: the prompt made from ``item[prompt_key]``, the ground
    truth ``item[truth_key]``."""

    name: str  # as in models/<name>_<r>, checkpoints/<name>_r<id>, train_<search|reason>@<r>
    loop: str
    loop_class: str
    tool: str
    tool_class: str
    messages: Callable[[str], list]
    prompt_key: str
    truth_key: str
    ability: str
    reward_style: str
    reward_keys: tuple[str, ...] = ()  # item fields the reward reads besides the ground truth (extra_info)


AGENTS = {
    "search": AgentSpec("search", SEARCH, "factrl.recipes.haris_verl.SearchAgentLoop", "retriever",
                        "factrl.recipes.haris_verl.RetrieverVerlTool", haris.search_messages, "question", "answer",
                        "fact_search", "judge"),
    "reason": AgentSpec("reason", REASONING, "factrl.recipes.haris_verl.ReasoningAgentLoop", "search_agent",
                        "factrl.recipes.haris_verl.SearchAgentVerlTool", haris.reasoning_messages, "claim", "label",
                        "claim_verification", "rule", ("num_hops",)),
}
# RolloutParams fields a verl loop or tool takes from factrl's params (the rest are the agents' own)
ROLLOUT_FIELDS = ("max_turns", "max_new_tokens", "max_context_tokens", "max_tool_response_tokens", "temperature")
METRICS_GLOB = "verl_metrics_*.jsonl"


@dataclasses.dataclass(frozen=True)
class Server:
    """A server the run starts: its command, extra environment and the URL that answers once up."""

    name: str
    command: list[str]
    ready_url: str
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    log: str = "server.log"  # its output, in the work directory


@dataclasses.dataclass
class VerlPlan:
    """Everything one verl training stage does, decided from params (see the module docstring)."""

    stage: str
    agent: str
    cfg: GRPOParams  # an agent's AgentTrainParams, or train_march's section
    init_model: str
    out_model: Path
    metrics_path: Path
    work_dir: Path
    tools: list[tuple[str, dict]]
    loops: dict[str, tuple[str, dict]]
    overrides: list[str]
    servers: list[Server]
    env: dict[str, str]
    search_model: str | None = None  # L_r, whose weights are part of the reasoning agent's run
    make_rows: Callable[[list], list[dict]] | None = None  # items -> verl rows; None = agent_rows(agent, .)

    @property
    def train_file(self) -> Path:
        return self.work_dir / "train.parquet"

    @property
    def tool_config(self) -> Path:
        return self.work_dir / "tools.yaml"

    @property
    def agent_loop_config(self) -> Path:
        return self.work_dir / "agent_loops.yaml"

    @property
    def command(self) -> list[str]:
        return verl_backend.main_ppo_command(self.overrides)

    def extra_fingerprint(self) -> dict[str, Any]:
        """What else the run's result depends on (hashed when the run starts, not when planned)."""
        extra: dict[str, Any] = {"backend": "verl"}
        if self.search_model is not None:
            extra["search_model"] = haris_rounds.model_digest(self.search_model)
        return extra

    def describe(self) -> str:
        """The shell lines the run executes, in order (what ``factrl train --dry-run`` prints)."""
        lines = [f"# {self.stage} on verl: {self.init_model} -> {self.out_model}"]
        for server in self.servers:
            lines.append(f"# {server.name} (started by the stage, stopped after it; ready at {server.ready_url})")
            lines.append(verl_backend.shell_line(server.command, server.env) + " &")
        lines.append(verl_backend.shell_line(self.command, self.env))
        return "\n".join(lines)


def _rollout_fields(params) -> dict[str, Any]:
    return {name: getattr(params, name) for name in ROLLOUT_FIELDS}


def plan(agent: str, rnd: RoundParams, train: TrainParams, *, index_dir: str | Path = "index",
         models_dir: str | Path = "models", checkpoints_dir: str | Path = "checkpoints",
         metrics_dir: str | Path = "metrics/train", device: str = "cuda") -> VerlPlan:
    """The verl run of ``agent`` (``search`` | ``reason``) in round ``rnd`` (paths absolute: Ray
    workers run elsewhere)."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; expected one of {sorted(AGENTS)}")
    from factrl.llm.vllm import base_url, serve_agent_command, served_name

    spec, cluster = AGENTS[agent], train.verl
    models_dir, index_dir = Path(models_dir).resolve(), Path(index_dir).resolve()
    cfg: AgentTrainParams = train.search if agent == "search" else train.reasoning
    section = "train.search" if agent == "search" else "train.reasoning"  # where cfg lives, for errors
    work_dir = (Path(checkpoints_dir) / f"{spec.name}_r{rnd.id}").resolve()
    host = reachable_host(cluster.serve_host)
    servers: list[Server] = []
    retriever_url = cluster.retriever_url
    if not retriever_url:
        retriever_url = f"http://{host}:{cluster.retriever_port}"
        servers.append(Server("factrl serve-retriever", [
            sys.executable, "-m", "factrl.cli", "serve-retriever", "--index", str(index_dir), "--mode",
            cfg.retrieval_mode, "--host", cluster.serve_host, "--port", str(cluster.retriever_port)],
            f"{retriever_url}/health", log="retriever.log"))
    tool_config = {"name": spec.tool, "retriever_url": retriever_url, "top_k": cfg.top_k}
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
        stage=f"train_{spec.name}@{rnd.id}", agent=agent, cfg=cfg, init_model=init_model,
        out_model=models_dir / f"{spec.name}_{rnd.id}",
        metrics_path=(Path(metrics_dir) / f"{spec.name}_r{rnd.id}.csv").resolve(), work_dir=work_dir,
        tools=[(spec.tool_class, tool_config)], loops={spec.loop: (spec.loop_class, {"rollout": rollout})},
        overrides=[], servers=servers, env={}, search_model=search_model)
    p.overrides = verl_backend.grpo_overrides(
        cfg, cluster, model_path=init_model, train_file=str(p.train_file), agent_name=spec.loop,
        tool_config=str(p.tool_config), agent_loop_config=str(p.agent_loop_config),
        state_dir=str(work_dir / "verl"), experiment=f"{spec.name}_r{rnd.id}", reward_function=REWARD_MODULE,
        reward_kwargs=reward_kwargs, device=device, section=section)
    p.env = main_ppo_env(work_dir, cluster)
    return p


def main_ppo_env(work_dir: Path, cluster: VerlParams) -> dict[str, str]:
    """``main_ppo``'s extra environment: where verl's file logger writes (``{launch}`` filled in per
    launch, so a resumed run keeps its earlier curve) and the training GPUs."""
    env = {verl_backend.LOG_FILE_ENV: str(work_dir / METRICS_GLOB.replace("*", "{launch}"))}
    if cluster.train_gpus:
        env["CUDA_VISIBLE_DEVICES"] = cluster.train_gpus
    return env


# --------------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------------


def agent_rows(agent: str, items: list[dict]) -> list[dict]:
    """verl rows of an agent's prompts: the search agent's (``id``, ``question``, ``answer``) or the
    reasoning agent's (``id``, ``claim``, ``label``)."""
    spec = AGENTS[agent]
    return [verl_backend.verl_row(
        index=i, data_source=spec.loop, agent_name=spec.loop, messages=spec.messages(it[spec.prompt_key]),
        ground_truth=it[spec.truth_key], ability=spec.ability, reward_style=spec.reward_style, tool_name=spec.tool,
        create_kwargs={"row_id": str(it["id"])},
        extra={"id": str(it["id"]), spec.prompt_key: it[spec.prompt_key],
               **{k: it[k] for k in spec.reward_keys if it.get(k) is not None}})
        for i, it in enumerate(items)]


def export(p: VerlPlan, items: list, tokenizer=None) -> None:
    """Write the rows (checked against ``train.verl.max_prompt_length`` when a tokenizer is given)
    and the tool and agent-loop configs into the plan's work directory."""
    rows = p.make_rows(items) if p.make_rows is not None else agent_rows(p.agent, items)
    verl_backend.check_rows(rows, f"{p.stage} prompts", tokenizer=tokenizer,
                            max_prompt_length=_override(p, "data.max_prompt_length"))
    verl_backend.write_dataset(rows, p.train_file)
    verl_backend.write_tool_config(p.tools, p.tool_config)
    verl_backend.write_agent_loop_config(p.loops, p.agent_loop_config)


def _override(p: VerlPlan, key: str) -> int:
    value = next(o.split("=", 1)[1] for o in p.overrides if o.startswith(key + "="))
    return int(value)


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------


def run(p: VerlPlan, items: list) -> haris_rounds.RunResult:
    """Export, serve, train with ``main_ppo``, merge the last checkpoint into ``p.out_model`` and
    write the curve (see the module docstring). A killed run resumes from verl's checkpoints in
    the work directory when its inputs (params, initial weights, prompts) are unchanged."""
    from transformers import AutoTokenizer

    from factrl.llm.models import resolve_model_path
    from factrl.rl.trainer import write_metrics
    from factrl.servers import spawn

    extra = p.extra_fingerprint()
    if not items:
        return haris_rounds.pass_on_unchanged(agent=p.agent, init_model=p.init_model, items=items, cfg=p.cfg,
                                              state_dir=p.work_dir, out_model=p.out_model,
                                              metrics_path=p.metrics_path, extra_fingerprint=extra)
    haris_rounds.prepare_state_dir(p.work_dir, haris_rounds.fingerprint(p.cfg, p.init_model, items, extra))
    resumed = verl_backend.latest_checkpoint(p.work_dir / "verl") is not None
    export(p, items, AutoTokenizer.from_pretrained(resolve_model_path(p.init_model)))
    env = {k: v.replace("{launch}", str(int(time.time()))) for k, v in p.env.items()}
    print(p.describe(), flush=True)
    with contextlib.ExitStack() as stack:
        for server in p.servers:
            stack.enter_context(spawn(server.command, server.ready_url, env=server.env, name=server.name,
                                      timeout=1800, log_path=p.work_dir / server.log))
        subprocess.run(p.command, env={**os.environ, **env}, check=True)
    actor = verl_backend.latest_checkpoint(p.work_dir / "verl")
    if actor is None:
        raise RuntimeError(f"{p.stage}: verl finished without a checkpoint in {p.work_dir / 'verl'}")
    rows = verl_backend.metrics_rows(line for f in sorted(p.work_dir.glob(METRICS_GLOB))
                                     for line in f.read_text(encoding="utf-8").splitlines())
    write_metrics(rows, p.metrics_path)
    tmp = p.out_model.with_name(f".{p.out_model.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    verl_backend.merge_checkpoint(actor, tmp)
    info = {"agent": p.agent, "init": p.init_model, "backend": "verl", "checkpoint": str(actor),
            "steps": p.cfg.steps, "prompts": len(items), "params": dataclasses.asdict(p.cfg),
            "final": rows[-1] if rows else {}}
    (tmp / "factrl_train.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(p.out_model, ignore_errors=True)
    os.replace(tmp, p.out_model)
    return haris_rounds.RunResult(rows=rows, resumed=resumed)


def train(agent: str, rnd: RoundParams, train_params: TrainParams, items: list[dict]) -> haris_rounds.RunResult:
    """A stage's run on verl: :func:`plan`, then :func:`run`, then the stage's summary line."""
    p = plan(agent, rnd, train_params)
    result = run(p, items)
    print(haris_rounds.summary_line(p.stage, result))
    return result
