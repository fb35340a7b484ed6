"""factrl.llm.engine_stats: the per-step engine metrics of a training row do not depend on which
other engines happen to be alive (a flaky resume test once compared a row labelled ``tiny_2`` against
one labelled ``tiny``)."""

from __future__ import annotations

import gc

from factrl.llm import engine_stats
from factrl.llm.engine_stats import EngineRegistry, engine_counters, engine_step_metrics, new_counters


class FakeEngine:
    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.stats = new_counters()

    def decode(self, rows: int, tokens: int) -> None:
        self.stats["decode_steps"] += 1
        self.stats["decoded_rows"] += rows
        self.stats["decoded_tokens"] += tokens
        self.stats["seconds"] += 0.5


def test_an_idle_engine_of_the_same_model_does_not_rename_the_active_ones(monkeypatch):
    monkeypatch.setattr(engine_stats, "ENGINES", EngineRegistry())
    leftover = FakeEngine("models/tiny")  # another run's engine the collector has not freed yet
    engine_stats.ENGINES.add(leftover)
    policy = FakeEngine("models/tiny")
    engine_stats.ENGINES.add(policy)
    before = engine_counters()
    policy.decode(rows=4, tokens=4)
    metrics = engine_step_metrics(before, engine_counters())
    assert metrics["engine_tiny_decode_tokens"] == 4 and metrics["engine_tiny_mean_batch"] == 4
    assert not any(k.startswith("engine_tiny_2") for k in metrics)
    del leftover
    gc.collect()
    assert len(engine_stats.ENGINES) == 1  # held weakly


def test_active_engines_of_one_model_are_numbered_in_registration_order(monkeypatch):
    monkeypatch.setattr(engine_stats, "ENGINES", EngineRegistry())
    first, second = FakeEngine("a/search"), FakeEngine("b/search")
    for e in (first, second):
        engine_stats.ENGINES.add(e)
    before = engine_counters()
    second.decode(rows=2, tokens=2)
    first.decode(rows=3, tokens=3)
    late = FakeEngine("c/search")  # created during the step: counted from zero
    engine_stats.ENGINES.add(late)
    late.decode(rows=1, tokens=5)
    metrics = engine_step_metrics(before, engine_counters())
    assert (metrics["engine_search_decode_tokens"], metrics["engine_search_2_decode_tokens"],
            metrics["engine_search_3_decode_tokens"]) == (3, 2, 5)
    assert list(engine_stats.ENGINES) == [first, second, late]
