"""MARCH on verl: one episode per row as a verl agent loop, scored inside the loop.

``march`` (:class:`MarchAgentLoop`) runs :func:`factrl.agents.march.march_loop`, the episode the
local trainer runs, on verl's rollout server: the solver answers, the proposer extracts the
answer's claims and the blind checker answers them ``checker_samples`` times, all from the policy
being trained (the paper's one policy in three roles). The registered reward named in the loop's
config (``march_ztr``, ``march_err``) scores the episode through
:func:`factrl.agents.march.score_episode`, as in the local trainer, and comes back as the row's
``reward_score``, so verl needs no reward function for these rows (it reads ``rm_scores``); the
reward's parts and the episode's counts (proposals, correct, hallucinated) come back as ``reward_extra_info``.

Only the solver's trajectory trains on verl: verl 0.9's agent loop returns one sequence per row, so
the checker's trajectories (trained jointly by the local trainer, ``train_roles: [solver, checker]``)
cannot come back from the same episode. That is the paper's solver-only ablation; the checker still
plays with the current weights.

``train_march.backend: verl`` (:func:`plan`, :func:`train`): the stage's GRPO on verl's ``main_ppo``
through :mod:`factrl.rl.verl_run`'s plan and run (rows, agent-loop config, Hydra overrides,
checkpoint merge, curve), with no tool and no server.

Rows (:func:`march_row`): the solver's prompt as verl's ``prompt``, the gold number as
``ground_truth`` (no role sees it; the logs' accuracy reads it; "cannot answer" for a question with
no gold number) and the question, whether its documents answer it and the documents in
``extra_info``, from which the loop rebuilds the item.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, register

from factrl.agents import march as agent
from factrl.agents.loop import CallTool, drive
from factrl.recipes.march_params import TrainMarchParams
from factrl.rewards import march as march_rewards
from factrl.rewards.registry import RewardKind, choose_reward
from factrl.rl import verl_backend, verl_run
from factrl.rl.verl_agent import PASSTHROUGH, FactrlAgentLoop, VerlEngine, plain

MARCH = "march"  # the agent loop's name and the rows' data_source
# the loop config's keys: default_march_params' arguments besides the sampling verl decides, and the reward
MARCH_KEYS = ("max_new_tokens", "checker_temperature", "checker_samples", "anchor_question", "reward")
LOOP_CLASS = "factrl.recipes.march_verl.MarchAgentLoop"
REWARD_MODULE = "pkg://factrl.recipes.march_verl"


def march_row(index: int, item: agent.MarchItem) -> dict:
    """The verl row of one MARCH question (see the module docstring)."""
    return verl_backend.verl_row(
        index=index, data_source=MARCH, agent_name=MARCH,
        messages=agent.solver_messages(item.question, item.documents),
        ground_truth=item.answer or agent.CANNOT_ANSWER,
        ability="numeric_rag", reward_style="march",
        extra={"id": item.id, "question": item.question, "answerable": item.answerable,
               "documents": [{"title": d.title, "text": d.text} for d in item.documents]})


def item_of(extra_info: dict, ground_truth: str | None) -> agent.MarchItem:
    """The question a row's ``extra_info`` describes (errors name the missing field)."""
    missing = [k for k in ("id", "question", "documents") if k not in extra_info]
    if missing:
        raise ValueError(f"a {MARCH} row needs extra_info.{missing[0]} (see "
                         f"factrl.recipes.march_verl.march_row); got {sorted(extra_info)}")
    documents = tuple(agent.Document(d["title"], d["text"]) for d in extra_info["documents"])
    answer = None if not ground_truth or ground_truth == agent.CANNOT_ANSWER else str(ground_truth)
    return agent.MarchItem(str(extra_info["id"]), extra_info["question"], documents, answer,
                           bool(extra_info.get("answerable", True)))


async def _no_tool(action: CallTool) -> str:
    raise RuntimeError(f"a MARCH role called a tool ({action.query!r}); its turns have none")


@functools.cache
def _reward(name: str):
    """The ``episode`` reward ``name`` of the march family; another name raises naming the ones there are."""
    return choose_reward(name, RewardKind.EPISODE, march_rewards.REWARDS, key="march.reward")


@register(MARCH)
class MarchAgentLoop(FactrlAgentLoop):
    """One MARCH episode per row on verl's server; the solver's trajectory is the row's sequence.

    ``march`` (the agent-loop config entry): ``reward`` (an ``episode`` reward of the march family, default
    ``march_ztr``) and :func:`factrl.agents.march.default_march_params`' ``max_new_tokens``,
    ``checker_temperature``, ``checker_samples``, ``anchor_question``. The solver samples at verl's
    temperature (greedy in validation); the proposer is greedy; the token budget is verl's.
    """

    def __init__(self, *args, march: dict | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        config = dict(plain(march) or {})
        unknown = sorted(set(config) - set(MARCH_KEYS))
        if unknown:
            raise ValueError(f"agent loop {MARCH!r}: unknown key march.{unknown[0]}; "
                             f"expected {list(MARCH_KEYS)}")
        self.reward_name = config.pop("reward", "march_ztr")
        _reward(self.reward_name)  # fail when the loop is built, not at the first row
        self.march_config = config

    def march_params(self, sampling_params: dict[str, Any], prompt_len: int) -> agent.MarchParams:
        limits = self.rollout_params(sampling_params, prompt_len)  # verl's temperature and token budget
        return agent.default_march_params(temperature=limits.temperature,
                                          max_context_tokens=limits.max_context_tokens, **self.march_config)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        reward_model = plain(kwargs.get("reward_model") or {})
        item = item_of(dict(plain(kwargs.get("extra_info")) or {}), reward_model.get("ground_truth"))
        prompt_ids = self.prompt_ids(agent.solver_messages(item.question, item.documents), kwargs)
        params = self.march_params(sampling_params, len(prompt_ids))
        engine = VerlEngine(self.server_manager, self.tokenizer, self.eos_ids,
                            {k: sampling_params[k] for k in PASSTHROUGH if k in sampling_params})
        loop = agent.march_loop(engine, item, params, train_roles=("solver",), tokenizer=self.tokenizer)
        episode = await drive(loop, engine.generate, _no_tool)
        scored = agent.score_episode(_reward(self.reward_name), episode)
        solver = episode.solver
        return AgentLoopOutput(
            prompt_ids=solver.prompt_ids, response_ids=solver.response_ids, response_mask=solver.loss_mask,
            response_logprobs=solver.response_logprobs, reward_score=float(scored.score), num_turns=2,
            metrics=AgentLoopMetrics(generate_sequences=engine.seconds, tool_calls=0.0),
            extra_fields={"reward_extra_info": {k: float(v) for k, v in scored.parts.items()},
                          "format_errors": dict(episode.format_errors)})


# --------------------------------------------------------------------------------------------
# the stage on verl
# --------------------------------------------------------------------------------------------

def plan(p: TrainMarchParams, *, init_model: str, out_model: Path, curves_dir: Path, work_dir: Path,
         device: str = "cuda"):
    """The verl run of one ``train_march`` seed (paths absolute: Ray workers run elsewhere); no side effect."""
    work_dir = Path(work_dir).resolve()
    loop_config = {"march": {"reward": p.reward, "max_new_tokens": p.max_new_tokens,
                             "checker_samples": p.checker_samples, "checker_temperature": p.checker_temperature,
                             "anchor_question": p.anchor_question}}
    vp = verl_run.VerlPlan(
        stage=f"train_march@{p.seed}", agent=MARCH, cfg=p, init_model=init_model, out_model=Path(out_model).resolve(),
        curves_dir=Path(curves_dir).resolve(), work_dir=work_dir, tools=[],
        loops={MARCH: (LOOP_CLASS, loop_config)}, overrides=[], servers=[], env={},
        make_rows=lambda items: [march_row(i, it) for i, it in enumerate(items)])
    # the reward is scored in the loop (rm_scores); verl still wants a reward function configured
    vp.overrides = verl_backend.grpo_overrides(
        p, p.verl, model_path=init_model, train_file=str(vp.train_file), agent_name=MARCH,
        tool_config=str(vp.tool_config), agent_loop_config=str(vp.agent_loop_config),
        state_dir=str(work_dir / "verl"), experiment=f"march_s{p.seed}", reward_function=REWARD_MODULE,
        device=device)
    vp.env = verl_run.main_ppo_env(work_dir, p.verl)
    return vp


def train(p: TrainMarchParams, items: list[agent.MarchItem], *, init_model: str, out_model: Path,
          curves_dir: Path, work_dir: Path):
    """GRPO of the solver on verl from ``init_model`` into ``out_model`` (resumes from verl's checkpoints)."""
    return verl_run.run(plan(p, init_model=init_model, out_model=out_model, curves_dir=curves_dir,
                             work_dir=work_dir), items)


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **_: Any) -> dict:
    """verl's reward hook, never reached for MARCH rows: their loop sets ``reward_score`` (a row that
    arrives here lost its episode, and scoring its text alone would drop the checker)."""
    raise RuntimeError(f"{data_source} rows are scored inside the {MARCH!r} agent loop (reward_score); "
                       "compute_score got one without it: is the row's agent_name the march loop?")
