"""HARIS on verl (factrl.recipes.haris.verl_loops): the loops and tools registered where verl looks, the
tools answering from a real ``factrl serve-retriever`` and a real ``factrl serve-llm``, greedy
rollouts of SmolLM2 identical to the local loop's (ids and masks), and ``compute_score`` equal to
the local trainer's rewards, loaded through verl's own reward hook.

verl is imported unconditionally: without it these tests fail, not skip.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.tools.tool_registry import load_all_tools
from verl.trainer.ppo.reward import get_custom_reward_fn

from factrl.agents import haris
from factrl.agents.rollout import run_rollouts
from factrl.agents.tools import RetrieverTool
from factrl.model_names import RoundParams
from factrl.recipes.haris import rounds as haris_rounds
from factrl.recipes.haris import verl_rounds
from factrl.recipes.haris.params import TrainParams
from factrl.recipes.haris.verl_loops import (
    REASONING,
    SEARCH,
    ReasoningAgentLoop,
    RetrieverVerlTool,
    SearchAgentLoop,
    SearchAgentVerlTool,
    compute_score,
)
from factrl.rl import verl_backend
from factrl.testing.servers import running_app
from tests.verl_standin import StandInServer, build_loop, cpu_config, run_loops


def lengths(turns: int, response: int = 2048) -> list[str]:
    return ["actor_rollout_ref.rollout.prompt_length=1024", f"actor_rollout_ref.rollout.response_length={response}",
            f"actor_rollout_ref.rollout.multi_turn.max_user_turns={turns}"]


# --------------------------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------------------------


def test_loops_and_tools_load_from_the_files_the_stage_writes(tmp_path):
    """What verl's workers do: tools from multi_turn.tool_config_path (verl's tool registry), loops
    from agent.agent_loop_config_path; both agents' plans."""
    assert _agent_loop_registry[REASONING] == {"_target_": "factrl.recipes.haris.verl_loops.ReasoningAgentLoop"}
    assert _agent_loop_registry[SEARCH] == {"_target_": "factrl.recipes.haris.verl_loops.SearchAgentLoop"}
    rnd = RoundParams(id=1, prev=0, segment="all")
    for agent, tool_cls, tool_name, stop in (("search", RetrieverVerlTool, "retriever", "</search>"),
                                             ("reason", SearchAgentVerlTool, "search_agent", "</question>")):
        p = verl_rounds.plan(agent, rnd, TrainParams(), checkpoints_dir=tmp_path / "ck", models_dir=tmp_path / "m")
        verl_backend.write_tool_config(p.tools, p.tool_config)
        verl_backend.write_agent_loop_config(p.loops, p.agent_loop_config)
        [tool] = load_all_tools(tool_config_path=str(p.tool_config), function_tool_path=None)
        assert type(tool) is tool_cls and tool.name == tool_name and tool.stop_tag == stop
        assert tool.config["retriever_url"] == "http://127.0.0.1:8000" and tool.config["top_k"] == 3
        [entry] = OmegaConf.load(p.agent_loop_config)
        loop_cls = ReasoningAgentLoop if agent == "reason" else SearchAgentLoop
        assert entry["_target_"] == f"{loop_cls.__module__}.{loop_cls.__qualname__}"
        assert entry["name"] == (REASONING if agent == "reason" else SEARCH)
    assert tool.config["model"] == str(tmp_path / "m" / "search_1") and tool.config["rollout"]["max_turns"] == 2


# --------------------------------------------------------------------------------------------
# rewards
# --------------------------------------------------------------------------------------------

VALID = "<think>a</think><question>Who?</question><result>X</result><verification>\\boxed{%s}</verification>"
REASONING_CASES = [(VALID % "Support", "SUPPORTS", 1.0), (VALID % "Refute", "SUPPORTS", 0.1),
                   (VALID % "Refute", "NOT ENOUGH INFO", 1.0), ("no tags at all", "REFUTES", 0.0),
                   ("<verification>\\boxed{Support}</verification> trailing", "SUPPORTS", 0.0)]
REPORT = "<think>a</think><search>q</search><result>r</result><report>%s</report>"
SEARCH_CASES = [(REPORT % "Ilse Parrow founded it.", "Ilse Parrow", 1.0),
                (REPORT % "Nobody knows.", "Ilse Parrow", 0.1), ("<report>unfinished", "Ilse Parrow", 0.0)]


def reward_hook(**reward_kwargs):
    """compute_score as verl's trainer loads it (reward.custom_reward_function, reward_kwargs merged)."""
    config = cpu_config("reward.custom_reward_function.path=pkg://factrl.recipes.haris.verl_loops",
                        *verl_backend.overrides_from({f"+reward.custom_reward_function.reward_kwargs.{k}": v
                                                      for k, v in reward_kwargs.items()}))
    return get_custom_reward_fn(config)


def test_compute_score_is_the_local_trainers_reward():
    hook = reward_hook()
    local = haris_rounds.reasoning_reward_fn()
    for text, label, expected in REASONING_CASES:
        [want] = local([{"label": label}], [SimpleNamespace(response_text=text)])
        got = hook(data_source=REASONING, solution_str=text, ground_truth=label, extra_info={"index": 0})
        assert got == {"score": want.score, **want.parts} and got["score"] == expected, text
    # "ask before you decide" (train.reasoning.require_question, passed as a reward kwarg): a
    # multi-hop verdict without a question is invalid; the hop count rides in extra_info
    direct = "<think>a</think><verification>\\boxed{Support}</verification>"
    strict, local = reward_hook(require_question=True), haris_rounds.reasoning_reward_fn(require_question=True)
    for hops in (1, 3):
        [want] = local([{"label": "SUPPORTS", "num_hops": hops}], [SimpleNamespace(response_text=direct)])
        got = strict(data_source=REASONING, solution_str=direct, ground_truth="SUPPORTS",
                     extra_info={"index": 0, "num_hops": hops})
        assert got == {"score": want.score, **want.parts} and got["score"] == (1.0 if hops == 1 else 0.0)
    # per_hop reaches the reward as the rule itself (one question per bridge), not as a truthy flag
    one_question = ("<think>a</think><question>Who?</question><result>B.</result>"
                    "<verification>\\boxed{Support}</verification>")
    per_hop = reward_hook(require_question="per_hop")
    got = per_hop(data_source=REASONING, solution_str=one_question, ground_truth="SUPPORTS",
                  extra_info={"index": 0, "num_hops": 3})
    assert got["score"] == 0.0 and got["format"] == 0.0
    hook = reward_hook(judge="rule", judge_threshold=0.5)
    local = haris_rounds.search_reward_fn(haris_rounds.search_judge("rule", 0.5, ""))
    for text, answer, expected in SEARCH_CASES:
        [want] = local([{"question": "Who founded Orlen?", "answer": answer}], [SimpleNamespace(response_text=text)])
        got = hook(data_source=SEARCH, solution_str=text, ground_truth=answer,
                   extra_info={"index": 3, "question": "Who founded Orlen?", "num_turns": 2})
        assert got == {"score": want.score, **want.parts} and got["score"] == expected, text


def test_compute_score_names_what_is_wrong():
    with pytest.raises(ValueError, match="data_source 'gsm8k' names no HARIS reward"):
        compute_score("gsm8k", "x", "1")
    with pytest.raises(ValueError, match="needs extra_info.question"):
        compute_score(SEARCH, "x", "answer", {"index": 0})
    with pytest.raises(ValueError, match="unknown gold label"):
        compute_score(REASONING, "x", "MAYBE")


# --------------------------------------------------------------------------------------------
# tools against real servers
# --------------------------------------------------------------------------------------------


def test_tools_answer_from_real_factrl_servers(local_llm, demo_world, demo_retriever):
    """The retriever tool over HTTP gives the in-process retriever's passages; the search-agent tool
    runs a whole search rollout on ``factrl serve-llm`` (token ids over /v1/completions) and
    reports what the in-process search agent reports."""
    from factrl.llm.serve import create_app as llm_app
    from factrl.retrieval.server import create_app as retriever_app

    claims, _ = demo_world
    question = f"Who is mentioned in this claim: {claims[0]['claim']}"
    search_params = {"max_turns": 1, "max_new_tokens": 40, "temperature": 0.0}
    local_tool = RetrieverTool(demo_retriever, k=3)
    with running_app(retriever_app(demo_retriever)) as retriever_url, running_app(llm_app(local_llm)) as llm_url:
        retriever = RetrieverVerlTool({"retriever_url": retriever_url, "top_k": 3})
        for query in (claims[1]["claim"], ""):
            assert asyncio.run(retriever.answer(query)) == local_tool([query])[0]
        served = SearchAgentVerlTool({"model": local_llm.model_name, "base_url": f"{llm_url}/v1",
                                      "retriever_url": retriever_url, "top_k": 3, "rollout": search_params})
        got = asyncio.run(served.answer(question))
    local = haris_rounds.search_agent_tool(local_llm, local_tool, haris.default_search_params(**search_params))
    assert got == local([question])[0] and got.strip()


# --------------------------------------------------------------------------------------------
# parity with the local loop on SmolLM2
# --------------------------------------------------------------------------------------------


def assert_same(local_trajs, outs):
    for traj, out in zip(local_trajs, outs, strict=True):
        assert out.prompt_ids == traj.prompt_ids
        assert out.response_ids == traj.response_ids
        assert out.response_mask == traj.loss_mask
        assert out.extra_fields["num_tool_calls"] == traj.num_tool_calls
        # the engine's log-probs of the sampled ids reach verl (its rollout correction reads them); equal
        # up to float noise: the local run decodes its rows in one batch, the stand-in one at a time
        assert traj.response_logprobs is not None
        assert out.response_logprobs == pytest.approx(traj.response_logprobs, abs=1e-4)


@pytest.mark.slow
def test_greedy_rollouts_match_the_local_loop_on_smollm2(local_llm, demo_world, demo_retriever):
    """The same claims / questions, greedy, through factrl's loop and through verl's agent loops
    (SmolLM2 behind the stand-in server): identical ids and masks; compute_score on verl's decoded
    response equals the local reward on the local response text."""
    claims = demo_world[0][:2]
    tok = local_llm.tokenizer
    server = StandInServer(local_llm)
    # search agent: retrieval behind </search>
    questions = [f"Who is mentioned in this claim: {c['claim']}" for c in claims]
    search_params = haris.default_search_params(max_turns=1, max_new_tokens=32, temperature=0.0)
    tool = RetrieverTool(demo_retriever, k=3)
    local = [r.trajectory for r in haris.run_search_agent(local_llm, questions, tool, search_params)]
    config = cpu_config(*lengths(turns=1))
    verl_tools = [RetrieverVerlTool({}, tool=tool)]
    outs = run_loops([(lambda: build_loop(SEARCH, config, server, tok, verl_tools, rollout={"max_new_tokens": 32}),
                       {"raw_prompt": haris.search_messages(q), "index": i, "tools_kwargs": {}})
                      for i, q in enumerate(questions)])
    assert_same(local, outs)
    assert sum(t.num_tool_calls for t in local) >= 1 and 0 in local[0].loss_mask
    # reasoning agent: a deterministic answerer behind </question> (the served search agent's role)
    answerer = RetrieverTool(demo_retriever, k=1, stop_tag="</question>")
    reason_params = haris.default_reasoning_params(max_turns=1, max_new_tokens=48, temperature=0.0)
    convs = [haris.reasoning_messages(c["claim"]) for c in claims]
    local = run_rollouts(local_llm, [local_llm.encode_chat(c) for c in convs], answerer, reason_params)
    verl_tools = [SearchAgentVerlTool({}, tool=answerer)]
    outs = run_loops([(lambda: build_loop(REASONING, config, server, tok, verl_tools, rollout={"max_new_tokens": 48}),
                       {"raw_prompt": conv, "index": i, "tools_kwargs": {}}) for i, conv in enumerate(convs)])
    assert_same(local, outs)
    assert sum(t.num_tool_calls for t in local) >= 1
    reward = haris_rounds.reasoning_reward_fn()
    for claim, traj, out in zip(claims, local, outs):
        [want] = reward([claim], [traj])
        decoded = tok.decode(out.response_ids, skip_special_tokens=True)  # what verl's reward manager hands over
        assert compute_score(REASONING, decoded, claim["label"])["score"] == want.score
