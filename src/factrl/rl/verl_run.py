"""One training stage on verl, whatever the recipe: a :class:`VerlPlan` decided from params, then
:func:`run` (``python -m verl.trainer.main_ppo`` on a Ray GPU cluster, with the servers its tools
reach).

A recipe builds the plan (HARIS: :func:`factrl.recipes.haris.verl_rounds.plan`; MARCH:
:func:`factrl.recipes.march_verl.plan`): the work directory (DVC ``persist``), the rows its items
make, the tool and agent-loop configs, the servers, verl's Hydra overrides and environment.
:func:`run` then exports the rows and configs (:func:`export`), starts the servers, runs
``main_ppo`` (which resumes from its own checkpoints after a kill), merges verl's last checkpoint
into the plan's model directory (Hugging Face format, atomically) and turns verl's metrics into the
stage's curve; the same fingerprint and resume rules as the local runs (:mod:`factrl.rl.runs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from factrl.io import model_digest
from factrl.rl import verl_backend
from factrl.rl.params import GRPOParams, VerlParams
from factrl.rl.runs import RunResult, fingerprint, pass_on_unchanged, prepare_state_dir

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
    curves_dir: Path
    work_dir: Path
    tools: list[tuple[str, dict]]
    loops: dict[str, tuple[str, dict]]
    overrides: list[str]
    servers: list[Server]
    env: dict[str, str]
    make_rows: Callable[[list], list[dict]]  # the recipe's items -> verl rows (verl_backend.verl_row)
    search_model: str | None = None  # a model the policy calls whose weights are part of the run (HARIS's L_r)

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
            extra["search_model"] = model_digest(self.search_model)
        return extra

    def describe(self) -> str:
        """The shell lines the run executes, in order (what ``factrl train --dry-run`` prints)."""
        lines = [f"# {self.stage} on verl: {self.init_model} -> {self.out_model}"]
        for server in self.servers:
            lines.append(f"# {server.name} (started by the stage, stopped after it; ready at {server.ready_url})")
            lines.append(verl_backend.shell_line(server.command, server.env) + " &")
        lines.append(verl_backend.shell_line(self.command, self.env))
        return "\n".join(lines)


def main_ppo_env(work_dir: Path, cluster: VerlParams) -> dict[str, str]:
    """``main_ppo``'s extra environment: where verl's file logger writes (``{launch}`` filled in per
    launch, so a resumed run keeps its earlier curve) and the training GPUs."""
    env = {verl_backend.LOG_FILE_ENV: str(work_dir / METRICS_GLOB.replace("*", "{launch}"))}
    if cluster.train_gpus:
        env["CUDA_VISIBLE_DEVICES"] = cluster.train_gpus
    return env


def step_rows(rows: list[dict], items: list, cfg: GRPOParams) -> list[dict]:
    """With ``cfg.balance_by``: ``rows`` (one per item) in the order the local trainer draws their
    items, step after step (``factrl.rl.sampling.step_prompts`` over the items' strata: every step's
    prompts hold the strata in proportion), ``cfg.steps * cfg.prompts_per_step`` rows. verl reads the
    file in that order (``data.shuffle`` false, :func:`factrl.rl.verl_backend.grpo_overrides`), so each
    of its batches holds the prompts of the local trainer's first draw of that step. Without
    ``balance_by``: ``rows`` as they are (verl shuffles them)."""
    if not cfg.balance_by:
        return rows
    if len(rows) != len(items):
        raise ValueError(f"{len(rows)} verl rows for {len(items)} items: balance_by orders one row per item")
    from factrl.rl.sampling import prompt_strata, step_prompts

    strata = prompt_strata(items, cfg.balance_by)
    return [rows[i] for step in range(cfg.steps)
            for i in step_prompts(len(rows), cfg.prompts_per_step, cfg.seed, step, strata)]


def export(p: VerlPlan, items: list, tokenizer=None) -> None:
    """Write the rows (checked against ``train.verl.max_prompt_length`` when a tokenizer is given;
    in the local trainer's balanced order when the run balances, :func:`step_rows`) and the tool and
    agent-loop configs into the plan's work directory."""
    rows = step_rows(p.make_rows(items), items, p.cfg)
    verl_backend.check_rows(rows, f"{p.stage} prompts", tokenizer=tokenizer,
                            max_prompt_length=_override(p, "data.max_prompt_length"))
    verl_backend.write_dataset(rows, p.train_file)
    verl_backend.write_tool_config(p.tools, p.tool_config)
    verl_backend.write_agent_loop_config(p.loops, p.agent_loop_config)


def _override(p: VerlPlan, key: str) -> int:
    value = next(o.split("=", 1)[1] for o in p.overrides if o.startswith(key + "="))
    return int(value)


def run(p: VerlPlan, items: list) -> RunResult:
    """Export, serve, train with ``main_ppo``, merge the last checkpoint into ``p.out_model`` and
    write the curve (see the module docstring). A killed run resumes from verl's checkpoints in
    the work directory when its inputs (params, initial weights, prompts) are unchanged."""
    from transformers import AutoTokenizer

    from factrl.llm.models import resolve_model_path
    from factrl.rl.step_log import write_history
    from factrl.servers import spawn

    extra = p.extra_fingerprint()
    if not items:
        return pass_on_unchanged(agent=p.agent, init_model=p.init_model, items=items, cfg=p.cfg,
                                              state_dir=p.work_dir, out_model=p.out_model,
                                              curves_dir=p.curves_dir, extra_fingerprint=extra)
    prepare_state_dir(p.work_dir, fingerprint(p.cfg, p.init_model, items, extra))
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
    write_history(rows, p.curves_dir)
    tmp = p.out_model.with_name(f".{p.out_model.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    verl_backend.merge_checkpoint(actor, tmp)
    info = {"agent": p.agent, "init": p.init_model, "backend": "verl", "checkpoint": str(actor),
            "steps": p.cfg.steps, "prompts": len(items), "params": dataclasses.asdict(p.cfg),
            "final": rows[-1] if rows else {}}
    (tmp / "factrl_train.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(p.out_model, ignore_errors=True)
    os.replace(tmp, p.out_model)
    return RunResult(rows=rows, resumed=resumed)
