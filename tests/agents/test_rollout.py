"""The batched multi-turn engine: exact loss masks on SmolLM2 tokenizations, limits, fallbacks."""

from __future__ import annotations

import importlib.util

import pyarrow as pa
import pytest

from factrl.agents.rollout import RolloutParams, extract_query, run_rollouts, truncate_middle
from factrl.data.schemas import TRAJECTORIES
from factrl.llm.models import embedded_weights_available


class EchoTool:
    """Answers every query with a marked string; records the batches it was called with."""

    stop_tag = "</search>"
    name = "echo"

    def __init__(self, size: int = 1):
        self.batches = []
        self.size = size

    def __call__(self, queries):
        self.batches.append(list(queries))
        return [f"TOOLRESULT for {q}: " + "fact " * self.size for q in queries]


def spans(traj):
    """Maximal runs of equal mask value as (mask, ids)."""
    out = []
    for tok, m in zip(traj.response_ids, traj.loss_mask):
        if out and out[-1][0] == m:
            out[-1][1].append(tok)
        else:
            out.append((m, [tok]))
    return out


def assert_mask_matches_turns(traj, tokenizer):
    """Every mask-1 run decodes to a model turn, every mask-0 run to an env turn, in order."""
    assert len(traj.loss_mask) == len(traj.response_ids)
    runs = spans(traj)
    assert [("model" if m else "env") for m, _ in runs] == [r for r, _ in traj.turns]
    for (_m, ids), (role, text) in zip(runs, traj.turns):
        assert tokenizer.decode(ids, skip_special_tokens=True) == text, (role, text)
    assert traj.response_text == "".join(t for _, t in traj.turns)


def scripted(turns_by_key):
    """reply(prompt): the script of the first key found in the prompt, indexed by tool results seen."""
    def reply(prompt):
        for key, turns in turns_by_key.items():
            if key in prompt:
                return turns[min(prompt.count("TOOLRESULT"), len(turns) - 1)]
        raise AssertionError("no script for prompt")
    return reply


SCRIPT = {
    "Alpha": ["<think>look</think> <search>alpha query</search>", "<think>more</think><search>beta</search>",
              "<think>ok</think><report>Alpha is X.</report>"],
    "Bravo": ["<think>I know it.</think><report>Bravo is Y.</report>"],
}


def _prompts(llm, keys):
    return [llm.encode_chat([{"role": "user", "content": f"Question about {k}"}]) for k in keys]


def test_mask_exact_with_smollm2_tokenizer(script_llm, tokenizer):
    llm = script_llm(scripted(SCRIPT))
    tool = EchoTool()
    params = RolloutParams(max_turns=4, max_new_tokens=64, end_tags=("</report>",))
    alpha, bravo = run_rollouts(llm, _prompts(llm, ["Alpha", "Bravo"]), tool, params)
    assert [r for r, _ in alpha.turns] == ["model", "env", "model", "env", "model"]
    assert alpha.num_tool_calls == 2 and alpha.queries == ["alpha query", "beta"]
    assert alpha.finish_reason == "stop" and bravo.finish_reason == "stop"
    assert bravo.num_tool_calls == 0 and [r for r, _ in bravo.turns] == ["model"]
    # one batched tool call per step, holding only the paused sequences
    assert tool.batches == [["alpha query"], ["beta"]]
    assert llm.calls == [2, 1, 1]
    for t in (alpha, bravo):
        assert_mask_matches_turns(t, tokenizer)
        assert t.response_text.endswith("</report>")
    # the generated ids are exactly the tokenizer's ids for each model turn
    first = spans(alpha)[0][1]
    assert first == tokenizer(SCRIPT["Alpha"][0], add_special_tokens=False)["input_ids"]
    assert alpha.turns[1][1] == "\n<result>\nTOOLRESULT for alpha query: fact \n</result>\n"


def test_eos_token_is_trained_and_prefix_is_injected(script_llm, tokenizer):
    llm = script_llm(lambda p: "I will not use tags.")
    params = RolloutParams(max_new_tokens=32, response_prefix="<think>", end_tags=("</report>",))
    [t] = run_rollouts(llm, _prompts(llm, ["x"]), EchoTool(), params)
    assert t.turns == [("env", "<think>"), ("model", "I will not use tags.")]
    assert t.response_ids[-1] == tokenizer.eos_token_id and t.loss_mask[-1] == 1
    assert t.loss_mask[0] == 0
    assert t.finish_reason == "stop"


def test_limits_max_turns_length_and_context(script_llm, tokenizer):
    loop = script_llm(lambda p: "<search>again</search>")
    [t] = run_rollouts(loop, _prompts(loop, ["x"]), EchoTool(), RolloutParams(max_turns=2, max_new_tokens=16))
    assert t.num_tool_calls == 2 and t.finish_reason == "max_turns"
    assert_mask_matches_turns(t, tokenizer)

    ramble = script_llm(lambda p: "word " * 50)
    [t] = run_rollouts(ramble, _prompts(ramble, ["x"]), EchoTool(), RolloutParams(max_new_tokens=10))
    assert t.finish_reason == "length" and len(t.response_ids) == 10

    prompt = _prompts(loop, ["x"])
    params = RolloutParams(max_turns=10, max_new_tokens=16, max_context_tokens=len(prompt[0]) + 40)
    [t] = run_rollouts(loop, prompt, EchoTool(), params)
    assert t.finish_reason == "length"
    assert len(t.prompt_ids) + len(t.response_ids) <= params.max_context_tokens


def test_tool_response_truncated_in_the_middle(script_llm, tokenizer):
    llm = script_llm(scripted({"x": ["<search>q</search>", "<report>done</report>"]}))
    params = RolloutParams(max_new_tokens=16, max_tool_response_tokens=20, end_tags=("</report>",))
    [t] = run_rollouts(llm, _prompts(llm, ["x"]), EchoTool(size=200), params)
    env = t.turns[1][1]
    assert "truncated" in env and env.startswith("\n<result>\nTOOLRESULT for q") and env.endswith("fact \n</result>\n")
    injected = [i for i, m in zip(t.response_ids, t.loss_mask) if m == 0]
    wrapper = tokenizer("\n<result>\n\n</result>\n", add_special_tokens=False)["input_ids"]
    assert len(injected) <= 20 + len(wrapper) + 2
    assert t.results[0].count("fact") == 200  # the untruncated answer is kept for the record
    assert_mask_matches_turns(t, tokenizer)


def test_n_samples_are_prompt_major(script_llm):
    llm = script_llm(scripted(SCRIPT))
    trajs = run_rollouts(llm, _prompts(llm, ["Alpha", "Bravo"]), EchoTool(),
                         RolloutParams(max_new_tokens=64, end_tags=("</report>",)), n=2)
    assert [t.num_tool_calls for t in trajs] == [2, 2, 0, 0]


def test_chat_only_backend_falls_back_to_messages(script_llm, tokenizer):
    llm = script_llm(scripted(SCRIPT), chat_only=True)
    convs = [[{"role": "user", "content": "Question about Alpha"}]]
    params = RolloutParams(max_new_tokens=64, end_tags=("</report>",))
    [t] = run_rollouts(llm, [[1, 2, 3]], EchoTool(), params, messages=convs)
    assert t.queries == ["alpha query", "beta"]
    assert t.turns[0][1].endswith("</search>")  # the dropped stop string is restored
    assert t.response_text.endswith("</report>")
    assert len(t.loss_mask) == len(t.response_ids) > 0
    with pytest.raises(Exception, match="messages="):
        run_rollouts(llm, [[1, 2, 3]], EchoTool(), params)


def test_helpers():
    assert extract_query("<think>a</think><search> b c </search>", "</search>") == "b c"
    assert extract_query("no open tag here</search>", "</search>") == "no open tag here"
    assert truncate_middle(list(range(10)), 20, [-1]) == list(range(10))
    assert truncate_middle(list(range(10)), 5, [-1]) == [0, 1, -1, 8, 9]
    with pytest.raises(ValueError, match="max_new_tokens"):
        RolloutParams(max_new_tokens=0)


def test_to_row_matches_schema(script_llm):
    llm = script_llm(scripted(SCRIPT))
    [t] = run_rollouts(llm, _prompts(llm, ["Alpha"]), EchoTool(), RolloutParams(max_new_tokens=64, end_tags=("</report>",)))
    row = t.to_row(id="t0", prompt_id="q0", agent="search", round=1, reward=1.0,
                   reward_parts={"judge": 1.0}, format_valid=True)
    table = pa.Table.from_pylist([row], schema=TRAJECTORIES)
    assert table.num_rows == 1 and table.column("num_tool_calls")[0].as_py() == 2


# a bare CUDA machine (`make test-gpu-bare`) has neither SmolLM2's weights nor the retriever's packages
BARE = not embedded_weights_available("smollm2-135m") or importlib.util.find_spec("bm25s") is None
NEEDS_WEIGHTS = pytest.mark.skipif(BARE, reason="needs SmolLM2-135M's weights (0.5 GB) and the BM25 retriever "
                                   "(bm25s): a bare CUDA machine has the tokenizer alone; `make test-gpu` runs it")


@pytest.mark.parametrize("device", [pytest.param("cpu", marks=pytest.mark.slow),  # minutes of SmolLM2 on 2 cores
                                    pytest.param("cuda", marks=[pytest.mark.gpu, NEEDS_WEIGHTS])])
def test_real_smollm2_rollout_mask(request, device, demo_retriever, tokenizer):
    """Real generations from SmolLM2 (on ``device``) with real retrieval: masks still decode to the
    turns, and the engine's log-prob of every generated id comes along."""
    from factrl.agents.haris import search_messages
    from factrl.agents.tools import RetrieverTool
    from factrl.llm.local import LocalLLM

    llm = request.getfixturevalue("local_llm") if device == "cpu" else LocalLLM("smollm2-135m", device=device)
    assert next(llm.engine_model.parameters()).device.type == device
    convs = [search_messages(q) for q in ("Who founded Orlen Studios?", "Where was Ilse Parrow born?")]
    ids = [llm.encode_chat(c) for c in convs]
    tool = RetrieverTool(demo_retriever, k=3)
    # the "<search>" prefix makes the untrained model close a query, so results get injected
    params = RolloutParams(max_turns=2, max_new_tokens=40, end_tags=("</report>",), response_prefix="<search>")
    trajs = run_rollouts(llm, ids, tool, params)
    assert any(t.num_tool_calls for t in trajs)
    for t in trajs:
        assert_mask_matches_turns(t, tokenizer)
        assert sum(t.loss_mask) > 0
        assert t.finish_reason in {"stop", "length", "max_turns"}
        assert len(t.response_logprobs) == len(t.response_ids)
        assert all(lp <= 0 for lp, m in zip(t.response_logprobs, t.loss_mask) if m)
        assert all(lp == 0 for lp, m in zip(t.response_logprobs, t.loss_mask) if not m)


def test_an_endpoint_without_a_tokenizer_runs_its_turns_as_chats():
    """An API model factrl has no tokenizer for (``openai:gpt-4o-mini``): its client's encode_chat
    raises TokensUnsupported, so a rollout's turn runs as a chat instead of crashing (found by
    bench/reliability_faults.py: HARIS on such an endpoint died before its first request)."""
    from factrl.agents.debate import prompt_tokens
    from factrl.agents.rollout import chat_prompt_ids
    from factrl.llm.openai_compat import OpenAICompatLLM

    llm = OpenAICompatLLM("gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="k")
    conversation = [{"role": "user", "content": "Is the sky green?"}]
    assert chat_prompt_ids(llm, conversation) is None
    assert prompt_tokens(llm, conversation) > 0
