"""HARIS wiring: questions go to a full search-agent rollout, reports come back as results."""

from __future__ import annotations

import pytest

from factrl.agents.haris import (
    REASONING_SYSTEM, SEARCH_SYSTEM, Haris, default_reasoning_params, default_search_params, format_trace,
    main, verify,
)
from factrl.agents.protocol import parse_reasoning, parse_search


def test_prompts_keep_the_papers_rules_and_examples_are_valid():
    assert "the claim" in REASONING_SYSTEM and "\\boxed{Support}" in REASONING_SYSTEM
    example = REASONING_SYSTEM.split("Claim: ")[-1].split("\n", 1)[1]
    assert parse_reasoning(example).format_valid and parse_reasoning(example).verdict == "REFUTES"
    search_example = SEARCH_SYSTEM.split("Question: ")[-1].split("\n", 1)[1]
    assert parse_search(search_example).format_valid


def _reply(prompt: str) -> str:
    """Reasoning: ask about Orsa, then decide; search: search once, then report."""
    tail = prompt.rsplit("Claim: ", 1)[-1] if "Claim: " in prompt.rsplit("Question: ", 1)[-1] else None
    if "You collect the information" in prompt:
        question = prompt.rsplit("Question: ", 1)[-1]
        if "Doc 1" in question:  # the retriever already answered (only injected results hold "Doc 1")
            return "<report>Orsa was founded by Ilse.</report>"
        return "look</think><search>Orsa founder</search>"
    assert tail is not None
    if "Orsa was founded by Ilse." in tail:
        return "<think>ok</think><verification>\\boxed{Support}</verification>"
    return "need founder</think><question>Who founded Orsa?</question>"


class OneDocRetriever:
    def __init__(self):
        self.queries = []

    def search(self, queries, k=3):
        from factrl.retrieval.index import Hit

        self.queries += list(queries)
        return [[Hit("p1", "Orsa", "Orsa is a company founded by Ilse.", 1.0)] for _ in queries]


def test_haris_routes_questions_through_search_agent(script_llm):
    llm = script_llm(_reply)
    retriever = OneDocRetriever()
    [res, res2] = verify(["Ilse founded Orsa.", "Ilse is the founder of Orsa."], reason_llm=llm, retriever=retriever)
    for r in (res, res2):
        assert r.verdict == "SUPPORTS" and r.parse.format_valid, r.trajectory.response_text
        assert r.trajectory.queries == ["Who founded Orsa?"]
        assert r.trajectory.results == ["Orsa was founded by Ilse."]  # the search agent's report
        [search] = r.searches
        assert search.question == "Who founded Orsa?" and search.parse.format_valid
        assert search.trajectory.queries == ["Orsa founder"]
    # both claims' questions were answered in one batched search-agent call
    assert retriever.queries == ["Orsa founder", "Orsa founder"]
    trace = format_trace(res)
    assert "[question 1] Who founded Orsa?" in trace and "[search 1] Orsa founder" in trace
    assert "VERDICT: SUPPORTS" in trace


@pytest.mark.slow
def test_real_haris_rollout_on_demo_world(local_llm, demo_world, demo_retriever, tokenizer):
    """End to end with SmolLM2 and the demo world's BM25 index (short generations)."""
    from tests.agents.test_rollout import assert_mask_matches_turns

    claims, _ = demo_world
    haris = Haris(local_llm, demo_retriever,
                  reason_params=default_reasoning_params(max_turns=1, max_new_tokens=40,
                                                         response_prefix="<think>I should ask.</think><question>"),
                  search_params=default_search_params(max_turns=1, max_new_tokens=32))
    [res] = haris.verify([claims[0]["claim"]])
    t = res.trajectory
    assert t.num_tool_calls == 1 and len(res.searches) == 1 and res.searches[0] is not None
    search = res.searches[0].trajectory
    assert_mask_matches_turns(t, tokenizer)
    assert_mask_matches_turns(search, tokenizer)
    # what the reasoning agent read is the search agent's report or, failing that, its passages
    assert t.results[0] == (res.searches[0].report or "\n".join(search.results) or t.results[0])
    assert res.verdict in {None, "SUPPORTS", "REFUTES"}
    assert "CLAIM:" in format_trace(res)


@pytest.mark.slow
def test_cli_verify_prints_trace(demo_world, capsys):
    _, index = demo_world
    claim = demo_world[0][0]["claim"]
    assert main([claim, "--index", str(index), "--mode", "bm25", "--max-turns", "1", "--max-new-tokens", "24"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"CLAIM: {claim}") and "VERDICT:" in out and "finish:" in out


def test_cli_verify_rejects_missing_index(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["x", "--index", str(tmp_path)])
    assert "holds no finished index" in capsys.readouterr().err


def test_cli_verify_sends_each_agent_where_its_spec_says(demo_world, script_llm, monkeypatch, capsys):
    """--backend openai routes both agents to the endpoint; an explicit spec keeps its own endpoint."""
    from factrl.llm import backends

    loaded = []
    reply = "I know.</think><verification>\\boxed{Support}</verification>"
    monkeypatch.setattr(backends, "load_llm", lambda spec: loaded.append(spec) or script_llm(lambda prompt: reply))
    _, index = demo_world
    args = ["A claim.", "--index", str(index), "--mode", "bm25", "--max-turns", "1"]
    assert main([*args, "--backend", "openai", "--base-url", "http://h:1/v1", "--model", "served",
                 "--search-model", "openai:other@http://h:2/v1"]) == 0
    assert loaded == ["openai:served@http://h:1/v1", "openai:other@http://h:2/v1"]
    assert "VERDICT: SUPPORTS" in capsys.readouterr().out
