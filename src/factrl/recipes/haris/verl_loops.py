"""HARIS on verl: its two agents as verl agent loops, their tools as verl tools, their rewards as
one ``compute_score``, all made of the parts the local trainer uses (``factrl.agents``,
``factrl.rewards``, ``factrl.recipes.haris.rounds``).

Agent loops, registered by name (a row's ``agent_name``; ``factrl.rl.verl_backend`` also writes
them into ``rollout.agent.agent_loop_config_path`` so Ray workers that never imported this module
find them):

* ``haris_reasoning``: the reasoning agent; ``</question>`` goes to the ``search_agent`` tool.
* ``haris_search``: the search agent; ``</search>`` goes to the ``retriever`` tool.

Tools (``multi_turn.tool_config_path``, ``class_name`` + ``config``):

* :class:`RetrieverVerlTool` (``retriever``): top-k passages from ``factrl serve-retriever``
  (``config.retriever_url``), formatted as the local rollouts format them.
* :class:`SearchAgentVerlTool` (``search_agent``): one whole search-agent rollout per question on
  the served search agent L_r (``config.model`` behind ``config.base_url``: ``vllm serve`` through
  ``factrl serve-agent``, or ``factrl serve-llm``) searching ``config.retriever_url``; the answer
  is its report, as the paper serves L_r while H trains.

Rewards: :func:`compute_score` (``reward.custom_reward_function.path=pkg://factrl.recipes.haris.verl_loops``)
scores a response with the reward function named by the row's ``data_source`` (``haris_reasoning``,
``haris_search``) through the local trainer's reward functions, so both trainers see the same
rewards for the same text.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

from verl.experimental.agent_loop.agent_loop import register

from factrl.agents import haris
from factrl.agents.registry import agent
from factrl.agents.tools import RetrieverTool
from factrl.recipes.haris import rounds as haris_rounds
from factrl.rewards.haris import QuestionRule
from factrl.rl.verl_agent import FactrlAgentLoop, FactrlTool, plain

REASONING = agent("reason").verl.loop  # agent loop of the reasoning agent, and its reward
SEARCH = agent("search").verl.loop  # agent loop of the search agent, and its reward


# --------------------------------------------------------------------------------------------
# agent loops
# --------------------------------------------------------------------------------------------


@register(REASONING)
class ReasoningAgentLoop(FactrlAgentLoop):
    """The reasoning agent H: asks ``<question>``s that the served search agent answers."""

    tool_name = agent("reason").verl.tool
    default_params = staticmethod(haris.default_reasoning_params)


@register(SEARCH)
class SearchAgentLoop(FactrlAgentLoop):
    """The search agent L: ``<search>``es the retriever until it ``<report>``s."""

    tool_name = agent("search").verl.tool
    default_params = staticmethod(haris.default_search_params)


# --------------------------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------------------------


def _required(config: dict, key: str, tool: str) -> Any:
    if not config.get(key):
        raise ValueError(f"verl tool {tool!r}: config.{key} is required (see the tool config file)")
    return config[key]


def _retriever(config: dict, tool: str) -> RetrieverTool:
    from factrl.retrieval.client import RetrievalClient

    return RetrieverTool(RetrievalClient(_required(config, "retriever_url", tool)),
                         k=int(config.get("top_k", haris.TOP_K)))


class RetrieverVerlTool(FactrlTool):
    """``</search>`` -> top-k passages from ``factrl serve-retriever`` at ``config.retriever_url``."""

    default_name = "retriever"
    default_stop_tag = "</search>"
    argument = "query"
    description = "Search an encyclopedia; returns the top passages for the query."

    def build(self) -> RetrieverTool:
        return _retriever(self.config, self.name)


class SearchAgentVerlTool(FactrlTool):
    """``</question>`` -> the report of a search-agent rollout on the served L_r.

    config: ``model`` and ``base_url`` of the endpoint serving L_r, ``retriever_url`` and
    ``top_k`` of the retriever it searches, ``rollout`` (its :class:`RolloutParams` fields, e.g.
    ``max_turns``, ``max_new_tokens``, ``temperature``).
    """

    default_name = "search_agent"
    default_stop_tag = "</question>"
    argument = "question"
    description = "Ask a search assistant one self-contained factual question; returns its findings."

    def build(self):
        from factrl.llm.backends import endpoint_spec, load_llm

        llm = load_llm(endpoint_spec(_required(self.config, "model", self.name),
                                     _required(self.config, "base_url", self.name)))
        params = haris.default_search_params(**dict(plain(self.config.get("rollout")) or {}))
        return haris_rounds.search_agent_tool(llm, _retriever(self.config, self.name), params)


# --------------------------------------------------------------------------------------------
# rewards
# --------------------------------------------------------------------------------------------


def reward_item(data_source: str, ground_truth: str, extra_info: dict) -> dict:
    """The local trainer's item for a verl row: a claim's label (and hop count), or a question and
    its pseudo answer."""
    if data_source == REASONING:
        return {"label": ground_truth, "num_hops": extra_info.get("num_hops")}
    if data_source == SEARCH:
        if not extra_info.get("question"):
            raise ValueError(f"a {SEARCH} row needs extra_info.question (the asked question); got {sorted(extra_info)}")
        return {"question": extra_info["question"], "answer": ground_truth}
    raise ValueError(f"data_source {data_source!r} names no HARIS reward; expected {REASONING!r} or {SEARCH!r}")


@functools.cache
def _reward_fn(data_source: str, judge: str, judge_threshold: float, judge_model: str,
               require_question: QuestionRule):
    if data_source == SEARCH:
        return haris_rounds.search_reward_fn(haris_rounds.search_judge(judge, judge_threshold, judge_model), SEARCH)
    return haris_rounds.reasoning_reward_fn(data_source, require_question=require_question)


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None, *,
                  judge: str = "rule", judge_threshold: float = 0.8, judge_model: str = "",
                  require_question: QuestionRule = False, **_: Any) -> dict:
    """verl's reward hook: the score of one response (``{"score": ..., **parts}``).

    ``judge`` / ``judge_threshold`` / ``judge_model`` choose the search agent's usefulness judge
    (``judge_model`` is an LLM spec such as ``openai:gpt-4o-mini``), ``require_question`` the
    reasoning reward's "ask before you decide" rule (all from
    ``reward.custom_reward_function.reward_kwargs``); other keyword arguments verl passes are ignored.
    """
    item = reward_item(data_source, ground_truth, dict(plain(extra_info) or {}))
    fn = _reward_fn(data_source, judge, float(judge_threshold), judge_model, require_question)
    [result] = fn([item], [SimpleNamespace(response_text=solution_str)])
    return {"score": float(result.score), **{k: float(v) for k, v in result.parts.items()}}
