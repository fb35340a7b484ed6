"""factrl's agent loop inside verl (factrl.rl.verl_agent), with a scripted model behind a stand-in
for verl's rollout server: the same ids and masks as the local loop, verl's limits honoured, the
sampling verl's server receives, clear errors.

verl is imported unconditionally (tests.verl_standin): without it these tests fail, not skip.
"""

from __future__ import annotations

import pytest
from verl.experimental.agent_loop.agent_loop import register

from factrl.agents.rollout import RolloutParams, run_rollouts
from factrl.llm.base import SamplingParams
from factrl.llm.tokens import completion_from_ids
from factrl.rl.verl_agent import FactrlAgentLoop, FactrlTool, VerlEngine
from tests.script_llm import ScriptLLM
from tests.verl_standin import GREEDY, StandInServer, build_loop, cpu_config, run_loops

SCRIPT = {
    "Alpha": ["I look.</think> <search>alpha query</search>", "More.</think><search>beta</search>",
              "<think>ok</think><report>Alpha is X.</report>"],
    "Bravo": ["I know it.</think><report>Bravo is Y.</report>"],
    "Charlie": ["Hmm.</think> <search>charlie</search>", "I give up"],  # ends without a tag: EOS
}


def reply(prompt: str) -> str:
    for key, turns in SCRIPT.items():
        if f"about {key}" in prompt:
            return turns[min(prompt.count("TOOLRESULT"), len(turns) - 1)]
    raise AssertionError(f"no script for {prompt[-80:]!r}")


class EchoTool:
    stop_tag = "</search>"
    name = "echo"

    def __call__(self, queries):
        return [f"TOOLRESULT for {q}: fact" for q in queries]


def echo_params(**kw) -> RolloutParams:
    return RolloutParams(**{"max_turns": 4, "max_new_tokens": 64, "max_context_tokens": 4096,
                            "end_tags": ("</report>",), "response_prefix": "<think>", **kw})


@register("test_echo_agent")
class EchoAgentLoop(FactrlAgentLoop):
    tool_name = "echo"
    default_params = staticmethod(echo_params)


class EchoVerlTool(FactrlTool):
    default_name = "echo"

    def build(self):
        return EchoTool()


def messages(key: str) -> list[dict]:
    return [{"role": "user", "content": f"Question about {key}"}]


@pytest.fixture(scope="module")
def tok():
    from tests.rl.tiny import tokenizer

    return tokenizer()


@pytest.fixture(scope="module")
def config():
    return cpu_config("actor_rollout_ref.rollout.prompt_length=256", "actor_rollout_ref.rollout.response_length=512",
                      "actor_rollout_ref.rollout.multi_turn.max_user_turns=4")


def verl_rollouts(config, script, tok, keys, tools=None, **loop_kwargs):
    server = StandInServer(script)
    tools = tools if tools is not None else [EchoVerlTool({})]
    outs = run_loops([(lambda: build_loop("test_echo_agent", config, server, tok, tools, **loop_kwargs),
                       {"raw_prompt": messages(k), "index": i, "tools_kwargs": {}}) for i, k in enumerate(keys)])
    return outs, server


def test_same_ids_and_masks_as_the_local_loop(config, tok):
    script = ScriptLLM(tok, reply)
    keys = ["Alpha", "Bravo", "Charlie"]
    local = run_rollouts(script, [script.encode_chat(messages(k)) for k in keys], EchoTool(), echo_params())
    outs, _ = verl_rollouts(config, script, tok, keys)
    for traj, out in zip(local, outs):
        assert out.prompt_ids == traj.prompt_ids
        assert out.response_ids == traj.response_ids
        assert out.response_mask == traj.loss_mask
        assert out.extra_fields == {"num_tool_calls": traj.num_tool_calls, "finish_reason": traj.finish_reason}
    alpha, bravo, charlie = local
    assert alpha.num_tool_calls == 2 and bravo.num_tool_calls == 0 and charlie.num_tool_calls == 1
    # the EOS the model ended with is trained (mask 1); injected spans (prefix, results) are not
    assert charlie.response_ids[-1] == tok.eos_token_id and charlie.loss_mask[-1] == 1
    assert 0 in alpha.loss_mask and outs[0].num_turns == 1 + 3 + 2


def test_verl_limits_bind_the_loop(config, tok):
    """multi_turn.max_user_turns caps tool calls; a response never outgrows rollout.response_length."""
    script = ScriptLLM(tok, reply)
    one_call = cpu_config("actor_rollout_ref.rollout.multi_turn.max_user_turns=1",
                          "actor_rollout_ref.rollout.prompt_length=256",
                          "actor_rollout_ref.rollout.response_length=512")
    [alpha], _ = verl_rollouts(one_call, script, tok, ["Alpha"])
    assert alpha.extra_fields == {"num_tool_calls": 1, "finish_reason": "max_turns"}
    short = cpu_config("actor_rollout_ref.rollout.prompt_length=256", "actor_rollout_ref.rollout.response_length=30",
                       "actor_rollout_ref.rollout.multi_turn.max_user_turns=4")
    [alpha], _ = verl_rollouts(short, script, tok, ["Alpha"])
    assert alpha.extra_fields["finish_reason"] == "length" and len(alpha.response_ids) <= 30


def test_server_gets_vllm_sampling_and_one_request_id_per_trajectory(config, tok):
    script = ScriptLLM(tok, reply)
    sampled = dict(GREEDY, temperature=0.7, top_p=0.9, top_k=20, logprobs=True)
    server = StandInServer(script)
    run_loops([(lambda: build_loop("test_echo_agent", config, server, tok, [EchoVerlTool({})]),
                {"raw_prompt": messages("Alpha"), "index": 0, "tools_kwargs": {}})], sampling=sampled)
    assert len(server.requests) == 3 and len({r["request_id"] for r in server.requests}) == 1
    first = server.requests[0]
    assert first["stop"] == ["</search>", "</report>"] and first["include_stop_str_in_output"] is True
    assert (first["temperature"], first["top_p"], first["top_k"]) == (0.7, 0.9, 20)
    # verl's own request for the sampled ids' log-probs (rollout correction) reaches its server
    assert first["skip_special_tokens"] is True and first["logprobs"] is True


def test_loop_kwargs_override_the_rollout_defaults(config, tok):
    script = ScriptLLM(tok, reply)
    _, server = verl_rollouts(config, script, tok, ["Bravo"], rollout={"max_new_tokens": 7})
    assert server.requests[0]["max_tokens"] == 7


def test_prompt_over_budget_and_missing_tool_are_clear_errors(tok):
    script = ScriptLLM(tok, reply)
    tiny_prompt = cpu_config("actor_rollout_ref.rollout.prompt_length=5")
    with pytest.raises(ValueError, match=r"row 0: the prompt has \d+ tokens, more than rollout.prompt_length = 5"):
        verl_rollouts(tiny_prompt, script, tok, ["Alpha"])
    from hydra.errors import InstantiationException  # verl builds loops with hydra, which wraps the error

    with pytest.raises(InstantiationException, match=r"needs the verl tool 'echo'.*loaded: \[\]"):
        verl_rollouts(tiny_prompt, script, tok, ["Alpha"], tools=[])


def test_engine_completions_match_the_local_engines(tok):
    """TokenOutput ids (a final EOS included, as vLLM returns them) -> the Completion the local
    engine returns for the same generation: the EOS kept in the ids and out of the text, stop string
    kept, finish reason."""
    ids = tok("Paris.</search> and more", add_special_tokens=False)["input_ids"]
    stop = SamplingParams(max_tokens=50, stop=("</search>",))
    cut = next(j for j in range(1, len(ids) + 1) if "</search>" in tok.decode(ids[:j]))
    c = completion_from_ids(tok, ids[:cut], stop, eos_ids={tok.eos_token_id})
    assert (c.text, c.finish_reason, c.token_ids) == ("Paris.</search>", "stop", ids[:cut])
    c = completion_from_ids(tok, ids + [tok.eos_token_id], SamplingParams(max_tokens=50), eos_ids={tok.eos_token_id})
    assert (c.finish_reason, c.token_ids, c.text) == ("stop", ids + [tok.eos_token_id], tok.decode(ids))
    c = completion_from_ids(tok, ids[:3], SamplingParams(max_tokens=3), eos_ids={tok.eos_token_id})
    assert (c.finish_reason, c.token_ids) == ("length", ids[:3])


def test_verl_engine_is_the_stand_in_server_seen_through_completions(tok):
    import asyncio

    from factrl.agents.loop import Generate

    script = ScriptLLM(tok, lambda prompt: "I know it.</think><report>Y.</report>")
    engine = VerlEngine(StandInServer(script), tok, {tok.eos_token_id})
    params = SamplingParams(max_tokens=64, stop=("</report>",))
    prompt = script.encode_chat(messages("Bravo"))
    got = asyncio.run(engine.generate(Generate(None, params, prompt_ids=prompt)))
    [[want]] = script.complete_tokens([prompt], params)
    assert (got.text, got.token_ids, got.finish_reason) == (want.text, want.token_ids, want.finish_reason)
