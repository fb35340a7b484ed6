"""HARIS's agents, registered once by name: what every path that trains, warms or plans an agent
reads instead of branching on the agent's name (the local rounds, the warm start, verl, `factrl train`).

An agent's name is the one in its files: ``models/<name>_<r>``, ``checkpoints/<name>_r<id>`` and its
stage ``train_<name>@<r>``. Pure data, importable from anywhere (``factrl.config`` checks agent names
against it); the callables that build an agent's prompts and rollouts live with the agents
(:mod:`factrl.agents.haris`) and are chosen by the ``role`` recorded here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from factrl.registry import Registry


@dataclass(frozen=True)
class VerlForm:
    """What an agent is on verl (``factrl.recipes.haris.verl_rounds``), as dotted names verl imports.

    loop: its agent loop's registered name (a row's ``agent_name`` and ``data_source``, so also the
        reward's name). loop_class / tool_class: the classes verl loads. tool: the tool's name in
        the agent's turns. ability / reward_style: the row fields verl's reward manager reads.
    reward_keys: item fields the reward reads besides the ground truth (the row's ``extra_info``).
    """

    loop: str
    loop_class: str
    tool: str
    tool_class: str
    ability: str
    reward_style: str
    reward_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentSpec:
    """One agent.

    name: its files' and stage's name (``reason``: models/reason_<r>, train_reason@<r>).
    role: its role in the agent protocol (``factrl.agents.protocol``: which tags it writes, which
        parser checks it) and its tag in the warm start's files (the references' ``agent`` column,
        ``warmup/loss_<role>.csv``): ``reasoning`` or ``search``.
    params_attr: its section under params ``train`` (``train.reasoning``).
    reward: the default reward (``factrl.rewards``) its training uses.
    prompt_key / truth_key: the item fields its prompt is made from and its reward checks against.
    stop_tag: the tag that ends a turn and calls its tool.
    verl: its form on verl (:class:`VerlForm`).
    masks_tool_tokens: whether the tool's inserted tokens are masked out of the loss (always, in HARIS).
    """

    name: str
    role: str
    params_attr: str
    reward: str
    prompt_key: str
    truth_key: str
    stop_tag: str
    verl: VerlForm = field(compare=False)
    masks_tool_tokens: bool = True

    @property
    def params_key(self) -> str:
        """Its params section, dotted (``train.reasoning``), as errors name it."""
        return f"train.{self.params_attr}"

    @property
    def train_stage(self) -> str:
        """Its training stage in dvc.yaml (``train_reason``; one per round: ``train_reason@<r>``)."""
        return f"train_{self.name}"

    def state_dir(self, round_id: int, root: str | Path = "checkpoints") -> Path:
        """Its training state in round ``round_id`` (``checkpoints/reason_r1``; DVC ``persist``)."""
        return Path(root) / f"{self.name}_r{round_id}"

    def curves_dir(self, round_id: int, root: str | Path = "metrics/train") -> Path:
        """Its training curves in round ``round_id`` (``metrics/train/reason_r1``, DVCLive)."""
        return Path(root) / f"{self.name}_r{round_id}"

    def train_params(self, train):
        """Its section of a loaded ``train`` params section (:class:`factrl.recipes.haris.params.TrainParams`)."""
        return getattr(train, self.params_attr)


AGENTS: Registry[AgentSpec] = Registry("agent")
_VERL_LOOPS = "factrl.recipes.haris.verl_loops"
for _spec in (
    AgentSpec("reason", role="reasoning", params_attr="reasoning", reward="haris_reasoning", prompt_key="claim",
              truth_key="label", stop_tag="</question>",
              verl=VerlForm("haris_reasoning", f"{_VERL_LOOPS}.ReasoningAgentLoop", "search_agent",
                            f"{_VERL_LOOPS}.SearchAgentVerlTool", "claim_verification", "rule", ("num_hops",))),
    AgentSpec("search", role="search", params_attr="search", reward="haris_search", prompt_key="question",
              truth_key="answer", stop_tag="</search>",
              verl=VerlForm("haris_search", f"{_VERL_LOOPS}.SearchAgentLoop", "retriever",
                            f"{_VERL_LOOPS}.RetrieverVerlTool", "fact_search", "judge")),
):
    AGENTS.add(_spec.name, _spec)


def agent(name: str) -> AgentSpec:
    """The agent registered as ``name``; an error listing the known names otherwise."""
    return AGENTS.lookup(name)


def by_stage(stage: str) -> AgentSpec:
    """The agent trained by stage ``stage`` (``train_reason``)."""
    found = [spec for spec in AGENTS.values() if spec.train_stage == stage]
    if not found:
        raise KeyError(f"no agent is trained by stage {stage!r}; stages: {[s.train_stage for s in AGENTS.values()]}")
    return found[0]
