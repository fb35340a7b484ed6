"""Replaying reference turns (the warm start's examples): on a real SmolLM2 tokenization the labels
are -100 exactly on the prompt, the ``<think>`` prefix and every injected ``<result>`` (reports,
retrieved passages), and the ids and mask equal what the rollout loop records for the same text."""

from __future__ import annotations

import pytest

from factrl.agents.haris import (
    default_reasoning_params,
    default_search_params,
    reasoning_messages,
    search_messages,
)
from factrl.agents.rollout import RESULT_CLOSE, RESULT_OPEN, replay, run_rollouts
from factrl.agents.tools import RetrieverTool
from factrl.data.reference import search_turns, world_references
from factrl.llm.tokens import encode_chat
from factrl.rl.sft import IGNORE_INDEX, sft_example

AGENTS = {
    "reasoning": (reasoning_messages, default_reasoning_params(max_tool_response_tokens=192), "</question>"),
    "search": (search_messages, default_search_params(max_tool_response_tokens=192), "</search>"),
}


@pytest.fixture(scope="module")
def references(demo_world, demo_retriever):
    kept, _ = world_references(demo_world[0], RetrieverTool(demo_retriever, k=3))
    return {agent: next(r for r in kept if r["agent"] == agent) for agent in AGENTS}


def _runs(ids: list[int], labels: list[int]) -> list[tuple[bool, list[int]]]:
    """Maximal runs of (trained?, ids)."""
    out: list[tuple[bool, list[int]]] = []
    for tok, lab in zip(ids, labels):
        trained = lab != IGNORE_INDEX
        if out and out[-1][0] == trained:
            out[-1][1].append(tok)
        else:
            out.append((trained, [tok]))
    return out


@pytest.mark.parametrize("style", ["short", "full"])
@pytest.mark.parametrize("agent", list(AGENTS))
def test_labels_are_ignored_exactly_on_prompt_prefix_and_injected_results(references, tokenizer, agent, style):
    _assert_masks(tokenizer, agent, references[agent], style)


def test_a_requery_reference_trains_both_searches_and_masks_both_results(demo_world, demo_retriever, tokenizer):
    """A search reference whose first query misses (WarmupParams.search_max_turns 2): both queries
    and the report are targets, both passages' results context, on a real SmolLM2 tokenization."""
    claim = demo_world[0][0]
    subject = claim["hops"][0]["question"]
    gold = set(claim["hops"][0]["passage_ids"])
    other = next(c for c in demo_world[0] if not set(c["evidence_ids"]) & set(claim["evidence_ids"]))
    miss, hit = demo_retriever.search([other["claim"], claim["claim"]], 3)
    assert miss and not gold & {h.id for h in miss}
    gold = gold if gold & {h.id for h in hit} else {hit[0].id}
    turns, found = search_turns("Orlen", [("Zuvo", miss), ("Orlen", hit)], 2, gold)
    assert found and [t["role"] for t in turns] == ["model", "env", "model", "env"]
    assert "search again" in turns[2]["text"]
    row = {"prompt": subject, "turns": turns + [{"role": "model", "text": "<report>Orlen is a company.</report>"}]}
    _assert_masks(tokenizer, "search", row, "short")
    # one search allowed: only the query that finds the gold passage is written
    single, found = search_turns("Orlen", [("Zuvo", miss), ("Orlen", hit)], 1, gold)
    assert found and len(single) == 2 and "<search>Orlen</search>" in single[0]["text"]


def _assert_masks(tokenizer, agent: str, row: dict, style: str) -> None:
    messages, params, stop = AGENTS[agent]
    turns = [(t["role"], t["text"]) for t in row["turns"]]
    prompt = encode_chat(tokenizer, messages(row["prompt"], style))
    ex = sft_example(replay(tokenizer, prompt, turns, params, stop))
    ids, labels = ex["input_ids"], ex["labels"]
    assert ids[: len(prompt)] == prompt and labels[: len(prompt)] == [IGNORE_INDEX] * len(prompt)
    assert all(lab in (IGNORE_INDEX, tok) for tok, lab in zip(ids, labels))  # a label is the token itself
    # the response: the injected <think>, then the agent's turns and the wrapped tool answers in turn
    injected = ["<think>"] + [RESULT_OPEN + text + RESULT_CLOSE for role, text in turns if role == "env"]
    written = [text for role, text in turns if role == "model"]
    written[0] = written[0].removeprefix("<think>")
    expected = [(False, injected[0])] + [x for pair in zip(
        [(True, w) for w in written], [(False, i) for i in injected[1:]] + [None]) for x in pair if x]
    runs = _runs(ids[len(prompt):], labels[len(prompt):])
    assert [trained for trained, _ in runs] == [trained for trained, _ in expected]
    for (_, run_ids), (trained, text) in zip(runs, expected):
        assert tokenizer.decode(run_ids) == text, (trained, text)
    if agent == "search":  # the retrieved passages are context, never a target
        assert "Doc 1" in injected[1] and "Doc 1" not in tokenizer.decode([t for t in labels if t != IGNORE_INDEX])


def test_replay_equals_the_rollout_loop_on_the_same_text(references, tokenizer, script_llm):
    """The trajectory GRPO would record if the policy wrote the reference: same ids, same mask."""
    messages, params, stop = AGENTS["reasoning"]
    row = references["reasoning"]
    turns = [(t["role"], t["text"]) for t in row["turns"]]
    written = [text for role, text in turns if role == "model"]
    answers = [text for role, text in turns if role == "env"]

    def reply(prompt_text: str) -> str:
        k = prompt_text.count(RESULT_OPEN)
        return written[k].removeprefix("<think>") if k == 0 else written[k]

    class Tool:
        stop_tag, name = stop, "reports"

        def __init__(self):
            self.seen = []

        def __call__(self, queries):
            out = answers[len(self.seen): len(self.seen) + len(queries)]
            self.seen += queries
            return out

    llm = script_llm(reply)
    prompt = llm.encode_chat(messages(row["prompt"], "short"))
    [rolled] = run_rollouts(llm, [prompt], Tool(), params)
    replayed = replay(tokenizer, prompt, turns, params, stop)
    assert rolled.finish_reason == replayed.finish_reason == "stop"
    assert rolled.response_ids == replayed.response_ids and rolled.loss_mask == replayed.loss_mask
    assert replayed.queries == [text.split("<question>")[1].split("</question>")[0] for text in written[:-1]]


def test_replay_rejects_malformed_and_too_long_references(tokenizer):
    params = default_search_params(max_context_tokens=64)
    prompt = encode_chat(tokenizer, search_messages("Who founded Orlen Studios?", "short"))
    with pytest.raises(ValueError, match="alternate"):
        replay(tokenizer, prompt, [("model", "<think>a</think><search>q</search>"), ("model", "x")], params, "</search>")
    with pytest.raises(ValueError, match="response prefix"):
        replay(tokenizer, prompt, [("model", "<report>x</report>")], params, "</search>")
    with pytest.raises(ValueError, match="does not end with </search>"):
        replay(tokenizer, prompt, [("model", "<think>a</think>"), ("env", "r"), ("model", "<report>x</report>")],
               params, "</search>")
    long_turns = [("model", "<think>a</think><search>q</search>"), ("env", "passage " * 200),
                  ("model", "<report>x</report>")]
    with pytest.raises(ValueError, match="max_context_tokens"):
        replay(tokenizer, prompt, long_turns, default_search_params(max_context_tokens=len(prompt) + 40), "</search>")
