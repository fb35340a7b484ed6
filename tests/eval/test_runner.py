"""The evaluation runner: systems run batched over a per-hop sample; rows agree with scikit-learn.

HARIS runs for real (the agents, the multi-turn engine, a BM25 index over a tiny corpus) on a
scripted chat LLM whose verdict per claim is known, so every metric can be recomputed here.
"""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pytest
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

from factrl.agents.baselines import DECOMPOSE_SYSTEM, SINGLE_AGENT_SYSTEM
from factrl.agents.haris import REASONING_SYSTEM, SEARCH_SYSTEM
from factrl.agents.systems_registry import ClaimRun
from factrl.data.schemas import CLAIMS, METRICS, PASSAGES, TRAJECTORIES, validate
from factrl.eval import outputs, report, runner
from factrl.eval.report import table_rows
from factrl.eval.systems import ModelSystem, build_systems
from factrl.io import write_parquet
from factrl.llm.base import Completion, TokensUnsupported

SUPPORT, REFUTE = "\\boxed{Support}", "\\boxed{Refute}"


class ScriptedLLM:
    """A chat-only LLM that speaks the HARIS protocol and the baselines' prompts.

    Reasoning agent: one question, then a verdict chosen by a marker in the claim: ``[S]`` ->
    Support, ``[R]`` -> Refute, ``[X]`` -> no verification (malformed). Search agent: one search,
    then a report. Single agent: one search, then the marker's verdict. Decomposition: two
    sub-claims carrying the claim's marker. Verification signature (RAG, sub-claims): ``Verdict:``
    by the marker. Records every call so tests can check batching.
    """

    model_name = "scripted"

    def __init__(self):
        self.calls: list[int] = []  # batch size of every chat call

    def complete_tokens(self, prompts, params):
        raise TokensUnsupported("scripted chat model")

    @staticmethod
    def _marker(text: str) -> str:
        m = re.search(r"\[(S|R|X)\]", text)
        return m.group(1) if m else "S"

    def _reply(self, conv) -> str:
        system = conv[0]["content"] if conv and conv[0]["role"] == "system" else ""
        user = next(m["content"] for m in conv if m["role"] == "user")
        answered = sum(m["role"] == "assistant" for m in conv)
        if system == REASONING_SYSTEM:
            if answered == 0:
                return "<think>I need one fact.</think>\n<question>Who founded Orlen Studios?</question>"
            verdict = {"S": SUPPORT, "R": REFUTE}.get(self._marker(user))
            return (f"<think>Done.</think>\n<verification>{verdict}</verification>" if verdict
                    else "I am not sure about this one.")
        if system == SEARCH_SYSTEM:
            if answered == 0:
                return "<think>Search it.</think>\n<search>Orlen Studios founder</search>"
            return "<report>Orlen Studios was founded by Ilse Parrow.</report>"
        if system == SINGLE_AGENT_SYSTEM:
            if answered == 0:
                return "<think>Search it.</think>\n<search>Orlen Studios founder</search>"
            verdict = {"S": SUPPORT, "R": REFUTE}.get(self._marker(user))
            return f"<verification>{verdict}</verification>" if verdict else "No idea."
        if system == DECOMPOSE_SYSTEM:
            m = self._marker([c["content"] for c in conv if c["role"] == "user"][-1])
            return f"- Orlen Studios fact one [{m}] holds.\n- Orlen Studios fact two [{m}] holds."
        # a claim-verification signature prompt: the last user turn holds the claim
        last = [m["content"] for m in conv if m["role"] == "user"][-1]
        return {"S": "Verdict: Support", "R": "Verdict: Refute"}.get(self._marker(last), "Verdict: maybe")

    def chat(self, conversations, params):
        self.calls.append(len(conversations))
        return [[Completion(text=self._reply(c), finish_reason="stop")] for c in conversations]


def tiny_retriever(tmp_path):
    """A real BM25 index over five passages."""
    from factrl.retrieval.index import Retriever, build_index

    texts = ["Orlen Studios was founded by Ilse Parrow.", "Ilse Parrow was born in Tessik.",
             "Tessik is a harbour town.", "Varna is a city on the Black Sea.", "Parrow wrote three novels."]
    table = pa.table({"id": [f"p{i}" for i in range(5)], "title": [""] * 5, "text": texts, "source": ["t"] * 5})
    write_parquet(table, tmp_path / "passages.parquet", PASSAGES)
    build_index(tmp_path / "passages.parquet", tmp_path / "index", embedder=None, bm25=True)
    return Retriever(tmp_path / "index", mode="bm25")


def claims_table(spec: list[tuple[str, str, int | None]]) -> pa.Table:
    """(marker, label, hops) per claim -> a CLAIMS table."""
    rows = [{"id": f"c{i:02d}", "claim": f"Claim {i} [{m}] about Orlen Studios.", "label": lab, "num_hops": h,
             "source": "test"} for i, (m, lab, h) in enumerate(spec)]
    return validate(pa.Table.from_pylist(rows), CLAIMS, "test")


class ConstantSystem:
    """Always the same verdict, no questions, one search per claim; counts its batches."""

    def __init__(self, name: str, verdict: str | None):
        self.name, self.verdict, self.batches = name, verdict, []

    def run(self, claims, retriever):
        self.batches.append(len(claims))
        return [ClaimRun(verdict=self.verdict, searches=1) for _ in claims]


# 2-hop: 4 SUPPORTS / 4 REFUTES, 3-hop: 3 / 3 (one malformed); NOT ENOUGH INFO is dropped (binary task)
SPEC = ([("S", "SUPPORTS", 2)] * 3 + [("R", "SUPPORTS", 2)] + [("R", "REFUTES", 2)] * 2 + [("S", "REFUTES", 2)] * 2
        + [("S", "SUPPORTS", 3)] * 2 + [("X", "SUPPORTS", 3)] + [("R", "REFUTES", 3)] * 3
        + [("S", "NOT ENOUGH INFO", 2)])


def _expected(spec, hops):
    y_true, y_pred = [], []
    for m, lab, h in spec:
        if h == hops and lab != "NOT ENOUGH INFO":
            y_true.append(lab)
            y_pred.append({"S": "SUPPORTS", "R": "REFUTES", "X": "<none>"}[m])
    return y_true, y_pred


@pytest.fixture
def result(tmp_path):
    llm = ScriptedLLM()
    haris = ModelSystem("HARIS test", "haris", llm, llm, top_k=2, max_new_tokens=32, max_turns=2)
    always = ConstantSystem("Always supports", "SUPPORTS")
    sets = [runner.EvalSet("demo", claims_table(SPEC), tiny_retriever(tmp_path))]
    res = runner.evaluate(sets, [haris, always], per_hop=100, seed=3, batch_size=4, n_boot=200, trace_claims=2)
    return res, llm, always


def _cell(rows, system, hops):
    return {r["metric"]: r for r in rows if r["system"] == system and r["num_hops"] == hops}


@pytest.mark.parametrize("hops", [2, 3])
def test_haris_rows_agree_with_sklearn(result, hops):
    res, _, _ = result
    cell = _cell(res.rows, "HARIS test", hops)
    y_true, y_pred = _expected(SPEC, hops)
    kw = {"average": "weighted", "zero_division": 0}
    assert cell["accuracy"]["n"] == len(y_true) == (8 if hops == 2 else 6)
    assert cell["accuracy"]["value"] == pytest.approx(accuracy_score(y_true, y_pred))
    assert cell["precision_weighted"]["value"] == pytest.approx(precision_score(y_true, y_pred, **kw))
    assert cell["recall_weighted"]["value"] == pytest.approx(recall_score(y_true, y_pred, **kw))
    assert cell["f1_weighted"]["value"] == pytest.approx(f1_score(y_true, y_pred, **kw))
    assert cell["f1_macro"]["value"] == pytest.approx(
        f1_score(y_true, y_pred, average="macro", labels=sorted(set(y_true)), zero_division=0))
    # every claim asked one question, answered by one search; the malformed 3-hop claim has no verdict
    assert cell["avg_questions"]["value"] == 1.0 and cell["avg_searches"]["value"] == 1.0
    assert cell["no_verdict_rate"]["value"] == pytest.approx(0.0 if hops == 2 else 1 / 6)
    for r in cell.values():
        assert r["ci_low"] <= r["value"] + 1e-12 and r["value"] <= r["ci_high"] + 1e-12
    # rows are valid METRICS rows
    validate(pa.Table.from_pylist(res.rows, schema=METRICS), METRICS, "rows")


def test_values_are_those_of_the_script(result):
    res, _, _ = result
    # 2-hop: 3 + 2 right of 8; 3-hop: 2 + 3 right of 6 (the malformed one is wrong)
    assert _cell(res.rows, "HARIS test", 2)["accuracy"]["value"] == pytest.approx(5 / 8)
    assert _cell(res.rows, "HARIS test", 3)["accuracy"]["value"] == pytest.approx(5 / 6)
    always = _cell(res.rows, "Always supports", 2)
    assert always["accuracy"]["value"] == 0.5 and always["avg_questions"]["value"] == 0.0
    assert always["avg_searches"]["value"] == 1.0
    # weighted recall is accuracy, as the HARIS authors report it
    assert always["recall_weighted"]["value"] == always["accuracy"]["value"]


def test_systems_run_batched(result):
    res, llm, always = result
    assert always.batches == [4, 4, 4, 2]  # 14 binary claims in batches of 4
    assert max(llm.calls) == 4  # the reasoning agent's turns go out as one call per batch
    assert len([p for p in res.predictions if p["system"] == "HARIS test"]) == 14
    assert set(res.seconds) == {"demo/HARIS test", "demo/Always supports"}


def test_traces_of_the_first_claims(result):
    res, _, _ = result
    rows = [r for r in res.trajectories if r["id"].startswith("demo/HARIS test/")]
    # two traced claims, each a reasoning rollout and the search rollout behind its question
    assert sorted(r["agent"] for r in rows) == ["reasoning", "reasoning", "search", "search"]
    table = validate(pa.Table.from_pylist(res.trajectories, schema=TRAJECTORIES), TRAJECTORIES, "traces")
    assert table.num_rows == len(res.trajectories)
    first = [r for r in rows if r["agent"] == "reasoning"]
    preds = {p["claim_id"]: p for p in res.predictions if p["system"] == "HARIS test"}
    for r in first:
        p = preds[r["prompt_id"]]
        assert r["reward"] == float(p["verdict"] == p["label"])
        assert any(t["role"] == "env" and "Orlen Studios" in t["text"] for t in r["turns"])


def test_checkwhy_scores_accuracy_on_positive_claims(tmp_path):
    spec = [("S", "SUPPORTS", None)] * 3 + [("R", "SUPPORTS", None)] + [("R", "REFUTES", None)] * 5
    sets = [runner.EvalSet("checkwhy", claims_table(spec), None)]
    res = runner.evaluate(sets, [ConstantSystem("Always refutes", "REFUTES")], per_hop=50, seed=0, n_boot=100)
    cell = _cell(res.rows, "Always refutes", None)
    assert set(cell) == {"accuracy", *runner.COUNT_METRICS}  # no F1 on a one-class set
    assert cell["accuracy"]["value"] == 0.0 and cell["accuracy"]["n"] == 4  # REFUTES rows dropped
    nested = report.nested_metrics(res.rows)
    assert nested["checkwhy"]["all"]["Always refutes"]["accuracy"] == 0.0


def test_sampling_balances_labels_per_hop():
    spec = [("S", "SUPPORTS", 2)] * 10 + [("R", "REFUTES", 2)] * 4 + [("S", "SUPPORTS", 3)] * 6 + [("R", "REFUTES", 3)] * 6
    sample = runner.sample_set(runner.EvalSet("demo", claims_table(spec), None), per_hop=6, seed=1)
    counts = {}
    for lab, h in zip(sample.column("label").to_pylist(), sample.column("num_hops").to_pylist()):
        counts[(lab, h)] = counts.get((lab, h), 0) + 1
    assert counts == {("SUPPORTS", 2): 3, ("REFUTES", 2): 3, ("SUPPORTS", 3): 3, ("REFUTES", 3): 3}
    everything = runner.sample_set(runner.EvalSet("demo", claims_table(spec), None), per_hop=0, seed=1)
    assert everything.num_rows == len(spec)


def test_nested_metrics_and_table_rows(result):
    res, _, _ = result
    nested = report.nested_metrics(res.rows)
    cell = nested["demo"]["2hop"]["HARIS test"]
    assert cell["accuracy"] == pytest.approx(5 / 8) and cell["n"] == 8
    assert cell["ci_low"]["accuracy"] <= cell["accuracy"] <= cell["ci_high"]["accuracy"]
    json.dumps(nested)  # plain JSON
    rows = table_rows(nested)
    assert {(r["hops"], r["system"]) for r in rows} == {(h, s) for h in ("2hop", "3hop")
                                                         for s in ("HARIS test", "Always supports")}
    top = next(r for r in rows if r["hops"] == "2hop" and r["system"] == "HARIS test")
    assert top["accuracy"] == 62.5 and top["avg_questions"] == 1.0


def test_write_outputs(result, tmp_path):
    res, _, _ = result
    written = outputs.write_outputs(res, metrics_path=tmp_path / "m" / "eval.json", report_path=tmp_path / "r" / "eval.md",
                                    plots_dir=tmp_path / "p", traces_path=tmp_path / "r" / "traces.html",
                                    title="Tiny", notes=["n1"],
                                    reward_points=[{"agent": "reason", "round": 1, "step": s, "reward": 0.1 * s}
                                                   for s in (1, 2, 3)])
    assert json.loads(written["metrics"].read_text())["demo"]["3hop"]["HARIS test"]["n"] == 6
    md = written["report"].read_text()
    assert "| HARIS test |" in md and "HARIS (paper)" in md and "demo 2-hop Acc" in md
    assert "![accuracy](../p/accuracy.png)" in md and "![reward_curves](../p/reward_curves.png)" in md
    for key in ("accuracy_plot", "reward_plot"):
        assert written[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = written["traces"].read_text()
    assert html.startswith("<!DOCTYPE html>") and "Orlen Studios" in html


def test_build_systems_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown system"):
        build_systems(["haris", "oracle"], [("H", "m", "m")], "m", load_llm=lambda s: None)
    loaded = []
    systems = build_systems(["haris"], [("H1", "a", "b"), ("H2", "a", "a")], "m", load_llm=loaded.append)
    assert [s.name for s in systems] == ["H1", "H2"] and loaded == ["a", "b"]  # each model loaded once


def test_baselines_run_through_the_runner(tmp_path):
    llm = ScriptedLLM()
    systems = build_systems(["haris", "single_agent", "rag", "decompose_verify"], [("HARIS s", "m", "m")],
                            "m", load_llm=lambda spec: llm, max_new_tokens=32, max_turns=2)
    assert [s.name for s in systems] == ["HARIS s", "Single agent", "RAG", "Decomp-Verify"]
    sets = [runner.EvalSet("demo", claims_table(SPEC), tiny_retriever(tmp_path))]
    res = runner.evaluate(sets, systems, per_hop=100, seed=0, batch_size=8, n_boot=100, trace_claims=1)
    # every system follows the claim's marker, so all score what the script says
    for system in ("HARIS s", "Single agent", "RAG", "Decomp-Verify"):
        assert _cell(res.rows, system, 2)["accuracy"]["value"] == pytest.approx(5 / 8), system
        assert _cell(res.rows, system, 3)["no_verdict_rate"]["value"] == pytest.approx(1 / 6), system
    counts = {s: (_cell(res.rows, s, 2)["avg_questions"]["value"], _cell(res.rows, s, 2)["avg_searches"]["value"])
              for s in ("Single agent", "RAG", "Decomp-Verify")}
    assert counts == {"Single agent": (0.0, 1.0), "RAG": (0.0, 1.0), "Decomp-Verify": (2.0, 2.0)}
    agents = {r["agent"] for r in res.trajectories}
    assert agents == {"reasoning", "search", "single_agent", "rag", "decompose_verify"}
    validate(pa.Table.from_pylist(res.trajectories, schema=TRAJECTORIES), TRAJECTORIES, "traces")
    rag = next(r for r in res.trajectories if r["agent"] == "rag")
    assert any(t["role"] == "env" and "Orlen Studios" in t["text"] for t in rag["turns"])


class ReleasingLLM(ScriptedLLM):
    """A scripted LLM that logs its calls and when its engine memory is freed into a shared list."""

    def __init__(self, name: str, log: list[str]):
        super().__init__()
        self.name, self.log = name, log

    def chat(self, conversations, params):
        self.log.append(f"{self.name}:chat")
        return super().chat(conversations, params)

    def release(self):
        self.log.append(f"{self.name}:release")

    def clear_prefix_cache(self):
        self.log.append(f"{self.name}:clear")


def test_each_system_frees_its_engines_once_it_has_scored(tmp_path):
    """Three checkpoints' engines held their key/value slots and prefix caches at once (11 GiB on
    the demo): a system's engines are freed as soon as it is done, before the next system runs."""
    log: list[str] = []
    first, second = ReleasingLLM("a", log), ReleasingLLM("b", log)
    systems = [ModelSystem("first", "haris", first, first, max_new_tokens=32), ModelSystem("RAG", "rag", second)]
    sets = [runner.EvalSet("demo", claims_table(SPEC), tiny_retriever(tmp_path))]
    runner.evaluate(sets, systems, per_hop=100, seed=0, batch_size=8, n_boot=10, trace_claims=0)
    first_b, last_a = log.index("b:chat"), len(log) - 1 - log[::-1].index("a:chat")
    assert last_a < first_b  # one system after the other
    assert {"a:release", "a:clear"} <= set(log[last_a:first_b])  # freed in between
    assert log[-2:] == ["b:release", "b:clear"]


def test_paired_gains_per_hop_and_pooled():
    from factrl.eval.runner import paired_gains

    preds = []
    for i in range(12):
        hops = 2 + i % 2
        for system, right in (("warm", i < 4), ("trained", i < 10), ("rag", True)):
            preds.append({"dataset": "demo", "system": system, "claim_id": f"c{i}", "num_hops": hops,
                          "label": "SUPPORTS", "verdict": "SUPPORTS" if right else "REFUTES"})
    gains = paired_gains(preds, [("trained", "warm"), ("trained", "missing")], n_boot=200)
    cells = gains["demo"]["trained - warm"]
    assert set(gains["demo"]) == {"trained - warm"}
    assert set(cells) == {"pooled", "2hop", "3hop"}
    assert cells["pooled"]["mean"] == pytest.approx(0.5) and cells["pooled"]["n"] == 12
    assert cells["2hop"]["n"] == 6 and cells["pooled"]["ci95"][0] > 0


def test_cli_defaults_equal_the_stage_params():
    """`factrl evaluate` on a claim file scores it as stage evaluate scores the demo (params.yaml)."""
    from pathlib import Path

    from factrl.config import load_section
    from factrl.eval.cli import cli_parser
    from factrl.eval.params import EvaluateParams

    stage = load_section(EvaluateParams, Path(__file__).resolve().parents[2] / "params.yaml")
    args = cli_parser().parse_args(["--claims", "c.jsonl", "--passages", "p.jsonl", "--out", "o"])
    for key in ("per_hop", "seed", "top_k", "max_new_tokens", "max_turns", "batch_size", "n_boot", "trace_claims"):
        assert getattr(args, key) == getattr(stage, key), key
