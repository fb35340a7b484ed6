"""factrl.eval.workers: an evaluation's runs in worker processes give what the same runs give in the
stage's process, and whatever the plan missed still runs."""

from __future__ import annotations

import functools
import pickle

import pytest
import torch

from factrl.eval import workers
from factrl.eval.systems import build_systems, load_llm
from factrl.retrieval.index import Retriever


def _summary(runs):
    return [(r.verdict, r.questions, r.searches, [t.response_ids for _, t, _ in r.trajectories]) for r in runs]


def test_runs_in_two_worker_processes_match_the_same_runs_here(demo_world, demo_retriever):
    """HARIS on the real SmolLM2 (a pair system) and RAG, each a job of 3 claims in 2 one-thread
    workers: the same verdicts, questions and responses as one thread in this process."""
    claims = [c["claim"] for c in demo_world[0][:3]]
    loader = functools.partial(load_llm, device="cpu", precision="fp32")
    systems = build_systems(["haris", "rag"], [("HARIS (base)", "smollm2-135m", "smollm2-135m")], "smollm2-135m",
                            load_llm=loader, top_k=2, max_new_tokens=24, max_turns=2)
    jobs = [workers.RunJob(s, tuple(claims), demo_retriever, 8) for s in systems]
    run = workers.prefetch(jobs, 2, loader)
    assert isinstance(run, workers.Prefetched) and len(run.done) == 2
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a worker's thread count: the same arithmetic
    try:
        for system in systems:
            here, _ = workers.run_here(system, claims, demo_retriever, 8)
            there, seconds = run(system, claims, demo_retriever, 8)
            assert _summary(there) == _summary(here) and seconds > 0
    finally:
        torch.set_num_threads(before)
    assert run.done == {}  # each answer handed out once


class _Counting:
    name, pair, max_turns = "counting", False, 1

    def __init__(self):
        self.calls = []

    def run(self, claims, retriever):
        from factrl.agents.systems_registry import ClaimRun

        self.calls.append(list(claims))
        return [ClaimRun("SUPPORTS") for _ in claims]


def test_one_worker_or_systems_without_specs_run_here():
    system = _Counting()
    jobs = [workers.RunJob(system, ("a", "b"), None, 4)] * 2
    assert workers.prefetch(jobs, 2, load_llm) is workers.run_here  # not a ModelSystem: nothing to send
    assert workers.prefetch([], 1, load_llm) is workers.run_here


def test_a_run_the_plan_missed_runs_here():
    system = _Counting()
    run = workers.Prefetched({("counting", ("a",)): (["planned"], 1.0)})
    assert run(system, ["a"], None, 4) == (["planned"], 1.0) and system.calls == []
    runs, _ = run(system, ["b", "c"], None, 4)
    assert [r.verdict for r in runs] == ["SUPPORTS"] * 2 and system.calls == [["b", "c"]]


def test_a_retriever_travels_as_its_index_and_searches_alike(demo_world, demo_retriever):
    copy = pickle.loads(pickle.dumps(demo_retriever))
    assert copy is not demo_retriever and copy.dir == demo_retriever.dir
    query = [demo_world[0][0]["claim"]]
    assert copy.search(query, 3) == demo_retriever.search(query, 3)


def test_a_retriever_with_an_embedder_object_is_refused(demo_world):
    retriever = Retriever(demo_world[1], mode="bm25")
    retriever._init_args = (*retriever._init_args[:2], object(), *retriever._init_args[3:])
    with pytest.raises(TypeError, match="embedder object"):
        pickle.dumps(retriever)
