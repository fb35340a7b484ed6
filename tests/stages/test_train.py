"""Stages `train_search` and `train_reason`: each stage's pure function on a tiny demo world with
SmolLM2 (short generations, two steps), the state directory's resume-or-restart rule, and a killed
training run resumed to the same result as an uninterrupted one (tiny random Llama, subprocess).

Run as a script (``python -m tests.stages.test_train OUT KILL_AFTER``) it trains the search agent of
the tiny world with a tiny random policy and SIGKILLs itself after step KILL_AFTER, as a crash would.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from factrl.data.params import WorldParams
from factrl.llm.backends import open_llm
from factrl.recipes.haris import rounds as haris_rounds
from factrl.recipes.haris.params import ReasonTrainParams, SearchTrainParams
from factrl.rl.runs import RunResult
from factrl.rl.step_log import read_history, read_summary

REPO = Path(__file__).resolve().parents[2]
# no weight decay: it alone moves every weight, so "the weights moved" would not show a policy gradient
SHORT = dict(group_size=2, prompts_per_step=2, steps=2, lr=5e-5, weight_decay=0.0, micro_batch_size=4,
             max_new_tokens=16, checkpoint_every=1, keep_checkpoints=1, max_turns=1, max_context_tokens=1024,
             max_tool_response_tokens=64, retrieval_mode="bm25", precision="auto", seed=1)
QUESTION = "<question>Who founded it?</question>"


def tiny_world(root: Path) -> tuple[pa.Table, Path]:
    """(claims, BM25 index dir) of a 100-passage demo world."""
    from factrl.data.world import write_world
    from factrl.retrieval.index import build_index

    root.mkdir(parents=True, exist_ok=True)
    if not (root / "index" / "manifest.json").exists():
        write_world(WorldParams(seed=3, num_passages=100, num_claims=8, hops=(2,)), root / "p.parquet",
                    root / "c.parquet")
        build_index(root / "p.parquet", root / "index", embedder=None)
    return pq.read_table(root / "c.parquet"), root / "index"


def qa_table(claims: pa.Table) -> pa.Table:
    """qa pairs as synthesis writes them: the first hop's question, its gold answer as the answer."""
    rows = []
    for c in claims.to_pylist():
        hop = c["hops"][0]
        rows.append({"id": f"{c['id']}-q0", "claim_id": c["id"], "claim": c["claim"], "label": c["label"],
                     "question": hop["question"], "evidence": c["evidence"], "rationale": None,
                     "answer": hop["answer"], "gold_answer": hop["answer"], "round": 1,
                     "agent_checkpoint": "models/reason_0", "teacher_model": "gold", "prompt_hash": "h"})
    return pa.Table.from_pylist(rows)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return tiny_world(tmp_path_factory.mktemp("train_world"))


@pytest.fixture(scope="module")
def retriever(world):
    from factrl.retrieval.index import Retriever

    return Retriever(world[1], mode="bm25")


def _weights_changed(before: dict, model) -> bool:
    after = model.state_dict()
    return any(not before[k].equal(after[k]) for k in before)


class Wrapped:
    """An LLM seen through ``complete_tokens`` only: the step-level API (``submit`` / ``step``) is
    hidden, so agent loops send their requests in batches through the wrapper."""

    def __init__(self, llm):
        self.llm = llm

    def __getattr__(self, name):
        if name in ("submit", "step"):
            raise AttributeError(name)
        return getattr(self.llm, name)


class AsksFirst(Wrapped):
    """The policy LLM, except that its first turn is the scripted :data:`QUESTION` (an untrained
    policy almost never writes ``</question>``), so every reasoning rollout sends one question to
    the search agent; later turns are the policy's own samples."""

    def complete_tokens(self, prompts, params):
        from factrl.llm.base import Completion

        question = self.tokenizer(QUESTION, add_special_tokens=False)["input_ids"]
        answered = [self.tokenizer.decode(p[-8:]).rstrip().endswith("</result>") for p in prompts]
        own = iter(self.llm.complete_tokens([p for p, a in zip(prompts, answered) if a], params))
        asked = [Completion(QUESTION, question, "stop")] * params.n
        return [next(own) if a else asked for a in answered]


class Recording(Wrapped):
    """An LLM that keeps the decoded prompt of every request it continues."""

    def __init__(self, llm):
        super().__init__(llm)
        self.prompts = []

    def complete_tokens(self, prompts, params):
        self.prompts += [self.tokenizer.decode(p) for p in prompts]
        return self.llm.complete_tokens(prompts, params)


def _learning_signal(monkeypatch) -> None:
    """Add a checksum of the sampled ids to the stages' real rewards (0.9 real + 0.1 checksum), so
    the samples of a group score differently and every step has non-zero advantages (a random
    policy's rewards are all 0 otherwise, and a step would train on nothing); and let the
    reasoning policy ask its question first (:class:`AsksFirst`)."""
    from factrl.rewards.registry import RewardResult
    from tests.rl.tiny import checksum_reward

    def tie_broken(build):
        def make(*args, **kwargs):
            real = build(*args, **kwargs)

            def score(items, trajectories):
                return [RewardResult(0.9 * r.score + 0.1 * c, r.parts, r.format_valid)
                        for r, c in zip(real(items, trajectories), checksum_reward(items, trajectories))]

            return score

        return make

    for name in ("search_reward_fn", "reasoning_reward_fn"):
        monkeypatch.setattr(haris_rounds, name, tie_broken(getattr(haris_rounds, name)))
    build_rollout = haris_rounds.reasoning_rollout_fn
    monkeypatch.setattr(haris_rounds, "reasoning_rollout_fn",
                        lambda llm, tool, params: build_rollout(AsksFirst(llm), tool, params))


def _train_both(world, retriever, tmp_path, load, steps: int, monkeypatch) -> None:
    """Both agents train for ``steps`` real GRPO steps: weights move by the policy gradient alone (no
    weight decay; rewards that differ within groups), HF checkpoints and per-step metrics are
    written, checkpoints are dropped at the end; every question of the reasoning agent is answered
    by the search agent the first stage wrote (loaded from its directory)."""
    from factrl.llm.local import LocalLLM
    from factrl.recipes.haris.train import train_reason, train_search

    _learning_signal(monkeypatch)
    claims, _ = world
    params = dict(SHORT, steps=steps)
    model, tok = load()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = train_search(qa_table(claims), "init", retriever, SearchTrainParams(**params),
                       state_dir=tmp_path / "ck_s", out_model=tmp_path / "models" / "search_1",
                       curves_dir=tmp_path / "m" / "search_r1", model_tokenizer=(model, tok))
    assert [r["step"] for r in res.rows] == list(range(1, steps + 1)) and not res.resumed
    assert all(r["uniform_group_rate"] < 1 for r in res.rows)  # every step had a reward signal
    assert _weights_changed(before, model)
    out = tmp_path / "models" / "search_1"
    assert (out / "config.json").exists() and (out / "model.safetensors").exists()
    assert (out / "tokenizer.json").exists() and (out / "factrl_train.json").exists()
    rows = read_history(tmp_path / "m" / "search_r1")
    assert len(rows) == steps and {"reward_mean", "format_valid_rate", "kl", "tool_calls"} <= set(rows[0])
    assert all(0.0 <= float(r["reward_mean"]) <= 1.0 for r in rows)
    assert not (tmp_path / "ck_s" / "checkpoints").exists()

    search_llm = Recording(LocalLLM(str(out), precision="auto"))  # L_1 as written: a Hugging Face directory
    model2, tok2 = load()
    before2 = {k: v.clone() for k, v in model2.state_dict().items()}
    rp = ReasonTrainParams(**params, search_max_turns=1, search_max_new_tokens=12)
    res = train_reason(claims, "init", str(out), retriever, rp, state_dir=tmp_path / "ck_r",
                       out_model=tmp_path / "models" / "reason_1", curves_dir=tmp_path / "m" / "reason_r1",
                       search_llm=search_llm, model_tokenizer=(model2, tok2))
    assert len(res.rows) == steps and _weights_changed(before2, model2)
    assert all(r["uniform_group_rate"] < 1 for r in res.rows)
    assert (tmp_path / "models" / "reason_1" / "model.safetensors").exists()
    rows = read_history(tmp_path / "m" / "reason_r1")
    assert len(rows) == steps
    assert [float(r["tool_calls"]) for r in rows] == [1.0] * steps  # one question per rollout (max_turns 1)
    # every rollout of every step (prompts_per_step x group_size) had its question answered by L_1
    asked = sum("Question: Who founded it?" in p for p in search_llm.prompts)
    assert asked >= steps * SHORT["prompts_per_step"] * SHORT["group_size"]


def test_train_stages_on_tiny_world(world, retriever, tmp_path, monkeypatch):
    """Default suite: a tiny random Llama with SmolLM2's tokenizer, so the real prompts, tags,
    masks and checkpoints run in seconds."""
    from tests.rl.tiny import tiny_model, tokenizer

    def load():
        tok = tokenizer()
        return tiny_model(tok), tok

    _train_both(world, retriever, tmp_path, load, steps=2, monkeypatch=monkeypatch)


@pytest.mark.slow
def test_train_stages_with_smollm2(world, retriever, tmp_path, monkeypatch):
    """The real policy (SmolLM2-135M), one step per agent (minutes on 2 busy cores)."""
    from factrl.llm.models import load_model_and_tokenizer

    _train_both(world, retriever, tmp_path, lambda: load_model_and_tokenizer("smollm2-135m"), steps=1,
                monkeypatch=monkeypatch)


def test_reward_functions_score_by_name():
    """The reward functions the stages build score well-formed, correct responses 1.0, wrong ones 0.1,
    malformed ones 0, from the registered rewards."""
    from factrl.signatures import make_judge

    @dataclasses.dataclass
    class T:
        response_text: str

    reason = haris_rounds.reasoning_reward_fn()
    items = [{"label": "SUPPORTS"}, {"label": "REFUTES"}, {"label": "SUPPORTS"}]
    out = reason(items, [T("<think>x</think><verification>\\boxed{Support}</verification>"),
                         T("<think>x</think><verification>\\boxed{Support}</verification>"),
                         T("no tags at all")])
    assert [r.score for r in out] == [1.0, 0.1, 0.0]
    # "ask before you decide": the same verdicts without a question on 2-hop claims are invalid
    asking = haris_rounds.reasoning_reward_fn(require_question=True)
    out = asking([dict(it, num_hops=2) for it in items[:2]],
                 [T("<think>x</think><verification>\\boxed{Support}</verification>")] * 2)
    assert [r.score for r in out] == [0.0, 0.0]
    search = haris_rounds.search_reward_fn(make_judge("rule", threshold=0.8))
    items = [{"question": "Who founded Orlen?", "answer": "Ilse Parrow"}] * 3
    out = search(items, [T("<think>a</think><search>Orlen</search><result>r</result><report>Ilse Parrow founded it.</report>"),
                         T("<think>a</think><search>Orlen</search><result>r</result><report>Nobody knows.</report>"),
                         T("<report>")])
    assert [r.score for r in out] == [1.0, 0.1, 0.0]


# --------------------------------------------------------------------------------------------
# resume after a kill: a tiny random policy, so three runs take seconds
# --------------------------------------------------------------------------------------------

TINY = dict(SHORT, steps=3, lr=1e-3, max_new_tokens=8)


def _tiny_run(out: Path, kill_after: int | None, **params) -> RunResult:
    from factrl.recipes.haris.train import train_search
    from factrl.retrieval.index import Retriever
    from tests.rl.tiny import tiny_model, tokenizer

    claims, index = tiny_world(out.parent / "world")
    tok = tokenizer()
    model = tiny_model(tok)

    def on_step(row):
        if kill_after is not None and row["step"] == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    return train_search(qa_table(claims), "tiny-random", Retriever(index, mode="bm25"), SearchTrainParams(**(TINY | params)),
                        state_dir=out / "ck", out_model=out / "model", curves_dir=out / "curves",
                        model_tokenizer=(model, tok), on_step=on_step)


def test_a_kept_final_checkpoint_lets_a_longer_run_continue(tmp_path):
    """With ``keep_final_checkpoint`` a finished 2-step round keeps its step-2 checkpoint, and the
    same round raised to 3 steps continues from it (one step more, the first two rows kept) and
    ends on the weights of a straight 3-step run; without it the checkpoints go (the default)."""
    from safetensors.torch import load_file

    first = _tiny_run(tmp_path / "run" / "x", None, steps=2, keep_final_checkpoint=True)
    assert not first.resumed and [r["step"] for r in first.rows] == [1, 2]
    assert (tmp_path / "run" / "x" / "ck" / "checkpoints" / "step-000002").is_dir()
    longer = _tiny_run(tmp_path / "run" / "x", None, steps=3, keep_final_checkpoint=True)
    assert longer.resumed and [r["step"] for r in longer.rows] == [1, 2, 3]
    _tiny_run(tmp_path / "straight" / "x", None)
    assert not (tmp_path / "straight" / "x" / "ck" / "checkpoints").exists()
    a = load_file(tmp_path / "straight" / "x" / "model" / "model.safetensors")
    b = load_file(tmp_path / "run" / "x" / "model" / "model.safetensors")
    assert all(a[k].equal(b[k]) for k in a)


@pytest.mark.slow
def test_killed_training_resumes_to_the_uninterrupted_result(tmp_path):
    from safetensors.torch import load_file

    def run(name: str, kill_after: int | None) -> subprocess.CompletedProcess:
        args = [sys.executable, "-m", "tests.stages.test_train", str(tmp_path / name)]
        args += [str(kill_after)] if kill_after is not None else []
        return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)

    ref = run("ref", None)
    assert ref.returncode == 0, ref.stderr[-2000:]
    killed = run("run", 2)
    assert killed.returncode == -signal.SIGKILL
    assert (tmp_path / "run" / "ck" / "checkpoints" / "step-000002").exists()
    assert not (tmp_path / "run" / "model").exists()
    resumed = run("run", None)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed" in resumed.stdout
    a, b = load_file(tmp_path / "ref" / "model" / "model.safetensors"), load_file(tmp_path / "run" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    def learned(row: dict) -> dict:
        # not what was learned: timings, and the engines' counters (a resumed process starts with
        # empty prefix caches and memo, so it prefills more for the same rollouts)
        return {k: v for k, v in row.items() if not (k.endswith(("_time", "_per_s")) or k.startswith("engine_"))}

    strip = [learned(r) for r in read_history(tmp_path / "ref" / "curves")]
    assert strip == [learned(r) for r in read_history(tmp_path / "run" / "curves")]
    assert {"reward_mean", "format_valid_rate", "updates"} <= set(strip[0])


if __name__ == "__main__":
    result = _tiny_run(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)
    print("resumed" if result.resumed else "fresh", len(result.rows))


@pytest.mark.slow
def test_search_agent_served_over_http_answers_questions(world, retriever, tmp_path):
    """search_backend: server — L_r behind `factrl serve-llm`, reached by the OpenAI-compatible client
    (chat path), answers the reasoning agent's questions with reports or passed-on passages."""
    from tests.rl.tiny import tiny_model, tokenizer

    tok = tokenizer()
    tiny_model(tok).save_pretrained(tmp_path / "search_1")
    tok.save_pretrained(tmp_path / "search_1")
    p = ReasonTrainParams(**dict(SHORT, search_max_new_tokens=8))
    with open_llm(str(tmp_path / "search_1"), "server") as llm:
        assert type(llm).__name__ == "OpenAICompatLLM"
        tool = haris_rounds.search_agent_tool(llm, haris_rounds.RetrieverTool(retriever, k=2), haris_rounds.served_search_params(p))
        answers = tool(["Who founded Orlen Studios?", ""])
    assert len(answers) == 2 and answers[0].strip() and answers[1] == "No query was given: write the query between the tags."


def test_round_without_prompts_passes_the_agent_on(world, retriever, tmp_path):
    """Synthesis may keep no question in a round: L_r = L_prev (same weights), an empty plots file."""
    from safetensors.torch import load_file

    from factrl.recipes.haris.train import train_search
    from tests.rl.tiny import tiny_model, tokenizer

    claims, _ = world
    tok = tokenizer()
    model = tiny_model(tok)
    empty = qa_table(claims).slice(0, 0)
    res = train_search(empty, "init", retriever, SearchTrainParams(**SHORT), state_dir=tmp_path / "ck",
                       out_model=tmp_path / "search_2", curves_dir=tmp_path / "curves", model_tokenizer=(model, tok))
    assert res.rows == []
    saved = load_file(tmp_path / "search_2" / "model.safetensors")
    assert all(saved[k].equal(v) for k, v in model.state_dict().items() if k in saved)
    assert read_history(tmp_path / "curves") == [] and read_summary(tmp_path / "curves") == {}  # DVC's outs exist
    assert (tmp_path / "ck" / "fingerprint.json").exists()  # the persisted DVC out exists


def test_a_resumed_round_keeps_its_gate_figures(world, retriever, tmp_path, monkeypatch):
    """The gate is measured once per run: DVC removes ``metrics/gate`` before it reruns a killed
    stage, and the resumed stage reads the figures back from its persisted state directory instead of
    spending the gate's rollouts again; a run with other params measures anew."""
    from factrl.recipes.haris import train as haris_train

    measured: list[int] = []

    def fake_gate(claims, init_model, tool, rollout_params, params, device):
        measured.append(params.gate_claims)
        return {"pass_at_1": 0.5, "pass_at_4": 0.75, "uniform_group_rate": 0.25, "open": True,
                "decision": f"measured {len(measured)}"}

    monkeypatch.setattr(haris_train, "measure_gate", fake_gate)
    monkeypatch.setattr(haris_train.runs, "run_agent_training", lambda **kw: RunResult(rows=[], resumed=False))
    claims, _ = world
    gate = tmp_path / "metrics" / "gate" / "reason_r1.json"

    def stage(gate_claims: int) -> dict:
        gate.unlink(missing_ok=True)  # what dvc repro does to a stage's non-persisted outputs
        haris_train.train_reason(claims, "init", "search", retriever,
                                 ReasonTrainParams(**SHORT, gate_claims=gate_claims), state_dir=tmp_path / "ck",
                                 out_model=tmp_path / "reason_1", curves_dir=tmp_path / "curves",
                                 search_llm=object(), gate_path=gate)
        return json.loads(gate.read_text())

    first = stage(8)
    assert stage(8) == first and measured == [8]  # resumed: read back, not measured again
    assert stage(16)["decision"] == "measured 2" and measured == [8, 16]  # other params: another run
