"""One round of HARIS's coordinated training (Algorithm 1): GRPO of the search agent, then of the
reasoning agent with the freshly trained search agent as its tool.

For round r (``rounds`` in params.yaml)::

    train_search@r : L_prev --GRPO on qa_r (question -> <search> ... <report>)--> L_r
                     reward haris_search: a judge compares the report with the teacher's answer
    train_reason@r : H_prev --GRPO on the round's claims, L_r answering <question>s--> H_r
                     reward haris_reasoning: the verdict against the gold label

This module builds, for each agent, the prompts, the rollout function (items, G) -> trajectories and
the reward function (items, trajectories) -> rewards that :func:`factrl.rl.trainer.train` drives;
the local stages (:mod:`factrl.recipes.haris.train`) run them through
:func:`factrl.rl.runs.run_agent_training`, and verl (:mod:`factrl.recipes.haris.verl_loops`) through
its agent loops and reward hook.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa

from factrl.agents import haris
from factrl.agents.rollout import RolloutParams, run_rollouts
from factrl.agents.tools import RetrieverTool, SearchAgentTool
from factrl.model_names import RoundParams, chain_entry
from factrl.recipes.haris.params import ReasonTrainParams, SearchTrainParams
from factrl.rewards import haris as haris_rewards
from factrl.rewards import maporl as maporl_rewards
from factrl.rewards.haris import QuestionRule, with_hop_credit
from factrl.rewards.registry import RewardKind, choose_reward
from factrl.rl.params import AgentTrainParams
from factrl.rl.runs import select_prompts

# the reward families train.reasoning.reward may name (haris_reasoning, maporl_reasoning)
REASONING_FAMILIES = (haris_rewards.REWARDS, maporl_rewards.REWARDS)


# --------------------------------------------------------------------------------------------
# prompts
# --------------------------------------------------------------------------------------------


def search_items(qa: pa.Table) -> list[dict]:
    """The search agent's prompts: one per answered qa pair (``id``, ``question``, ``answer``)."""
    rows = qa.select(["id", "question", "answer"]).to_pylist()
    return [r for r in rows if r["answer"] is not None and r["question"].strip()]


def reasoning_items(claims: pa.Table) -> list[dict]:
    """The reasoning agent's prompts: one per claim (``id``, ``claim``, ``label``, ``num_hops``)."""
    return claims.select(["id", "claim", "label", "num_hops"]).to_pylist()


def search_prompts(qa: pa.Table, p: AgentTrainParams) -> list[dict]:
    """The search agent's training prompts of a round: its answered pairs, capped and shuffled by params."""
    return select_prompts(search_items(qa), p.max_prompts, p.seed)


def reasoning_prompts(claims: pa.Table, p: AgentTrainParams) -> list[dict]:
    """The reasoning agent's training prompts of a round: its claims, capped and shuffled by params."""
    return select_prompts(reasoning_items(claims), p.max_prompts, p.seed)


# --------------------------------------------------------------------------------------------
# rollout and reward functions
# --------------------------------------------------------------------------------------------


def search_rollout_params(p: SearchTrainParams) -> RolloutParams:
    """The search agent's rollouts during its training: sampled at the training temperature; the
    seed stays None so sampling follows the global generator the trainer seeds per step."""
    return haris.default_search_params(
        max_turns=p.max_turns, max_new_tokens=p.max_new_tokens, max_context_tokens=p.max_context_tokens,
        max_tool_response_tokens=p.max_tool_response_tokens, temperature=p.temperature)


def reasoning_rollout_params(p: ReasonTrainParams) -> RolloutParams:
    return haris.default_reasoning_params(
        max_turns=p.max_turns, max_new_tokens=p.max_new_tokens, max_context_tokens=p.max_context_tokens,
        max_tool_response_tokens=p.max_tool_response_tokens, temperature=p.temperature)


def served_search_params(p: ReasonTrainParams) -> RolloutParams:
    """How L_r answers the reasoning agent's questions while H trains (fixed, not trained)."""
    return haris.default_search_params(
        max_turns=p.search_max_turns, max_new_tokens=p.search_max_new_tokens,
        max_context_tokens=p.max_context_tokens, max_tool_response_tokens=p.max_tool_response_tokens,
        temperature=p.search_temperature)


def search_rollout_fn(llm, retriever_tool: RetrieverTool, params: RolloutParams) -> Callable:
    """``(items, n) -> trajectories``: ``n`` search-agent rollouts per question, item-major."""

    def rollout(items: list[dict], n: int) -> list:
        results = haris.run_search_agent(llm, [it["question"] for it in items], retriever_tool, params, n=n)
        return [r.trajectory for r in results]

    return rollout


def search_judge(name: str, threshold: float, model: str, device="auto"):
    """The usefulness judge of ``haris_search``: ``rule`` (token F1 / containment at ``threshold``,
    no model) or ``llm`` (the paper's LLM judge on ``model``, an LLM spec: a local model, on
    ``device``, or an endpoint such as ``openai:gpt-4o-mini``)."""
    from factrl.signatures import make_judge

    if name == "rule":
        return make_judge("rule", threshold=threshold)
    from factrl.llm.backends import load_llm

    return make_judge(name, llm=load_llm(model, device=str(device)))


def search_reward_fn(judge, reward: str = "haris_search") -> Callable:
    """``(items, trajectories) -> RewardResults``: the judge sees each well-formed report and the
    teacher's pseudo answer of its question (one batched judge call per step); ``reward``: a
    ``search_report`` reward of the haris family."""
    fn = choose_reward(reward, RewardKind.SEARCH_REPORT, haris_rewards.REWARDS)

    def score(items: list[dict], trajectories: list) -> list:
        return fn([t.response_text for t in trajectories], [it["question"] for it in items],
                  [it["answer"] for it in items], judge)

    return score


def reasoning_rollout_fn(llm, search_tool: SearchAgentTool, params: RolloutParams) -> Callable:
    """``(items, n) -> trajectories``: ``n`` reasoning-agent rollouts per claim, each question
    answered by the search agent behind ``search_tool`` (its report injected, loss mask 0)."""

    def rollout(items: list[dict], n: int) -> list:
        style = haris.prompt_style(llm)
        convs = [haris.reasoning_messages(it["claim"], style) for it in items]
        return run_rollouts(llm, [llm.encode_chat(c) for c in convs], search_tool, params, n=n, messages=convs)

    return rollout


def reasoning_reward_fn(reward: str = "haris_reasoning", *, require_question: QuestionRule = False,
                        hop_reward: float = 0.0, hop_answers: dict[str, list[str]] | None = None) -> Callable:
    """``(items, trajectories) -> RewardResults`` of the verdicts against the gold labels;
    ``require_question``: the "ask before you decide" rule (``rewards.haris.questions_required``);
    ``hop_reward``: per-hop shaping (:func:`factrl.rewards.haris.with_hop_credit`) with each claim's
    gold hop answers by claim id (:func:`hop_answers_of`); ``reward``: a ``claim_verdict`` reward of
    the haris or maporl family."""
    fn = choose_reward(reward, RewardKind.CLAIM_VERDICT, *REASONING_FAMILIES, key="train.reasoning.reward")
    answers = hop_answers or {}

    def score(items: list[dict], trajectories: list) -> list:
        return [with_hop_credit(fn(t.response_text, it["label"], num_hops=it.get("num_hops"),
                                   require_question=require_question),
                                t.response_text, answers.get(it.get("id"), []), hop_reward)
                for it, t in zip(items, trajectories)]

    return score


def hop_answers_of(claims: pa.Table) -> dict[str, list[str]]:
    """Each claim's gold hop answers (bridges, then the chain's end) by id; none for claims without
    hops (real claim sets)."""
    if "hops" not in claims.column_names:
        return {}
    return {cid: [h["answer"] for h in hops or [] if h.get("answer")]
            for cid, hops in zip(claims.column("id").to_pylist(), claims.column("hops").to_pylist())}


def search_agent_tool(search_llm, retriever_tool: RetrieverTool, params: RolloutParams) -> SearchAgentTool:
    """The ``</question>`` tool: one search-agent rollout per question, its report as the answer.
    History is off: training runs many steps and needs none of it."""

    def search_loop(question: str, stream: int):
        return haris.search_agent_loop(search_llm, question, retriever_tool, params, stream)

    return SearchAgentTool(search_loop, keep_history=False)


def find_round(rounds: Sequence[RoundParams], round_id: int) -> RoundParams:
    """The round ``round_id``, after checking the rounds chain (each starts from the one before)."""
    return chain_entry(rounds, round_id, section="rounds", noun="round")


def round_claims(rnd: RoundParams, max_claims: int = 0) -> pa.Table:
    """The claims of round ``rnd``'s curriculum piece (segments/<segment>.parquet in the current
    directory), validated; at most ``max_claims`` (0 = all) keeping the (label, hops) balance."""
    import pyarrow.parquet as pq

    from factrl.data.schemas import CLAIMS, validate
    from factrl.data.splits import balanced_subset

    segment_file = Path("segments") / f"{rnd.segment}.parquet"
    if not segment_file.exists():
        raise FileNotFoundError(f"{segment_file}: no such curriculum piece (round {rnd.id} asks for segment "
                                f"{rnd.segment!r}; check curriculum.segments)")
    claims = validate(pq.read_table(segment_file), CLAIMS, str(segment_file))
    return balanced_subset(claims, max_claims) if max_claims else claims
