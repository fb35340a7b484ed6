"""HARIS wiring: questions go to a full search-agent rollout, reports come back as results."""

from __future__ import annotations

import pytest

from factrl.agents.haris import (
    REASONING_SYSTEM,
    SEARCH_SYSTEM,
    Haris,
    default_reasoning_params,
    default_search_params,
    format_trace,
    verify,
)
from factrl.agents.protocol import escape_tags, parse_reasoning, parse_search


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


def _read_from(search) -> str:
    """What the reasoning agent should read for a question: the search agent's report; without one,
    the passages it retrieved; without those, a note saying so."""
    if search.report:
        return escape_tags(search.report)
    if search.retrieved:
        return escape_tags("\n".join(search.retrieved))
    return "The search agent found no information."


@pytest.mark.parametrize("search_ends", ["report", "no report", "no search"])
def test_reasoning_agent_reads_the_report_or_else_the_passages(script_llm, search_ends):
    def reply(prompt: str) -> str:
        if "You collect the information" in prompt:
            if search_ends == "no search":
                return "I know nothing about it.</think>"
            if "Doc 1" in prompt.rsplit("Question: ", 1)[-1]:
                return ("<report>Orsa was founded by Ilse.</report>" if search_ends == "report"
                        else "Ilse, I think.</think>")
            return "look</think><search>Orsa founder</search>"
        if "<question>" in prompt.rsplit("Claim: ", 1)[-1]:
            return "<think>ok</think><verification>\\boxed{Support}</verification>"
        return "need founder</think><question>Who founded Orsa?</question>"

    [res] = verify(["Ilse founded Orsa."], reason_llm=script_llm(reply), retriever=OneDocRetriever())
    [search] = res.searches
    read = res.trajectory.results
    assert read == [_read_from(search)]
    if search_ends == "report":
        assert read == ["Orsa was founded by Ilse."]
    elif search_ends == "no report":
        assert search.report is None and len(search.retrieved) == 1
        assert "Orsa is a company founded by Ilse." in read[0]
    else:
        assert search.report is None and not search.retrieved
        assert read == ["The search agent found no information."]
    assert res.verdict == "SUPPORTS"


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
    # (the trajectory keeps the tool's answer before truncation); which one depends on the model
    assert t.results[0] == _read_from(res.searches[0])
    # the verdict is the one the reasoning agent's own text gives (None without a valid verification)
    assert res.parse == parse_reasoning(t.response_text) and res.verdict == res.parse.verdict
    trace = format_trace(res)
    assert trace.startswith(f"CLAIM: {claims[0]['claim']}\n")
    assert f"[question 1] {t.queries[0]}" in trace and f"[result] {t.results[0].strip()}" in trace
    assert f"VERDICT: {res.verdict or 'none (no valid verification)'}" in trace
