"""The one system registry: a baseline registered there is an ``evaluate`` system and a debate member
system with no other edit, and evaluate and the debate run a baseline with the same settings."""

from __future__ import annotations

import pytest

from factrl.agents import debate
from factrl.agents.systems_registry import SYSTEMS, ClaimRun, RegisteredSystem, system_names
from factrl.config import from_dict
from factrl.eval.params import EvaluateParams
from factrl.eval.systems import build_systems, run_system
from factrl.recipes import scmaks
from factrl.recipes.scmaks_params import DebateParams
from factrl.verdicts import REFUTES, SUPPORTS
from tests.debate_fakes import DebateFake, by_label

# the generation phase only (no debate round), two passages a claim
OPENINGS = DebateParams(rounds=0, top_k=2, evidence_k=2, max_new_tokens=64, max_turns=5, answer_chars=200)


@pytest.fixture
def claims(demo_world):
    rows = demo_world[0][:3]
    return [{"id": r["id"], "claim": r["claim"]} for r in rows], {r["claim"]: r["label"] for r in rows}


class RecordingFake(DebateFake):
    """A :class:`DebateFake` that also records the sampling params of every chat call."""

    def __init__(self, policy):
        super().__init__(policy)
        self.params: list = []

    def chat(self, conversations, params):
        self.params.append(params)
        return super().chat(conversations, params)


def _oracle(claims, llm, retriever, *, top_k, max_new_tokens, max_turns, temperature=0.0, seed=None):
    return [ClaimRun(verdict=SUPPORTS if "a" in c else REFUTES, format_valid=True, text=f"<think>oracle {top_k}</think>")
            for c in claims]


def test_a_registered_baseline_is_an_evaluate_system_and_a_debate_member(monkeypatch, claims, demo_retriever):
    items, _ = claims
    monkeypatch.setitem(SYSTEMS, "oracle", RegisteredSystem("Oracle", _oracle))
    assert "oracle" in system_names()
    # evaluate: params accept it, build_systems makes it, it runs
    assert from_dict(EvaluateParams, {"systems": ["oracle"]}, "evaluate").systems == ("oracle",)
    [system] = build_systems(["oracle"], [], "m", load_llm=lambda spec: None, top_k=2)
    texts = [c["claim"] for c in items]
    evaluated = [r.verdict for r in run_system(system, texts, demo_retriever, batch_size=2)]
    # the debate: the pool check accepts it and a member answers with it
    pool = [{"name": "Ann", "system": "oracle"}]
    scmaks.debate_plan(from_dict(DebateParams, {"pool": pool}, "debate"))
    member = debate.Member("Ann", "oracle", llm=None)
    [state, *_] = states = debate.Debate([member], demo_retriever, OPENINGS, roles=()).run(items)
    opening = [s.rounds[0].answers["Ann"] for s in states]
    assert [a.verdict for a in opening] == evaluated
    assert opening[0].text == "oracle 2" and all(a.format_valid for a in opening)


@pytest.mark.parametrize("system", ["rag", "decompose_verify", "single_agent"])
def test_evaluate_and_the_debate_run_a_baseline_with_the_same_settings(system, claims, demo_retriever):
    """Greedy, the same budgets: both send the LLM the same prompts with the same sampling params
    (so the LLM disk cache below either answers the other's calls)."""
    items, labels = claims
    texts = [c["claim"] for c in items]
    in_evaluate, in_debate = RecordingFake(by_label(labels)), RecordingFake(by_label(labels))
    [evaluated] = build_systems([system], [], "base", load_llm=lambda spec: in_evaluate, top_k=OPENINGS.top_k,
                                max_new_tokens=OPENINGS.max_new_tokens, max_turns=OPENINGS.max_turns)
    evaluate_runs = run_system(evaluated, texts, demo_retriever, batch_size=len(texts))
    states = debate.Debate([debate.Member("Cyd", system, in_debate)], demo_retriever, OPENINGS, roles=()).run(items)
    assert in_debate.params == in_evaluate.params and in_debate.seen == in_evaluate.seen
    assert [s.rounds[0].answers["Cyd"].verdict for s in states] == [r.verdict for r in evaluate_runs]


def test_a_fixed_budget_is_the_methods_whatever_the_caller_asks(claims, demo_retriever):
    items, labels = claims
    fake = RecordingFake(by_label(labels))
    SYSTEMS["rag"].answer([items[0]["claim"]], fake, demo_retriever, top_k=2, max_new_tokens=512, max_turns=5,
                            temperature=0.7, seed=4)
    [params] = fake.params
    assert (params.max_tokens, params.temperature, params.seed) == (SYSTEMS["rag"].fixed_new_tokens, 0.7, 4)
    assert SYSTEMS["single_agent"].fixed_new_tokens is None  # an agent's per-turn budget is the caller's
