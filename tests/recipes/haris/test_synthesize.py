"""The recipe of stage `synthesize` (factrl.recipes.haris.synthesize): one round on a tiny demo world
with a fake rollout function and teacher.

The teacher fan-out runs for real (Prefect tasks under a test harness, the disk cache, batch
checkpoints); only the LLM is a counting fake, so calls can be counted exactly.
"""

from __future__ import annotations

import threading

import pytest

from factrl.data.params import WorldParams
from factrl.data.splits import balanced_subset
from factrl.data.world_claims import generate_claims
from factrl.llm.base import Completion
from factrl.model_names import RoundParams
from factrl.orchestration.teacher import TeacherBatchError
from factrl.recipes.haris import synthesize as recipe
from factrl.recipes.haris.params import SynthesizeParams
from factrl.recipes.haris.rounds import find_round
from factrl.signatures import PseudoAnswer
from factrl.testing.prefect_harness import prefect_harness


@pytest.fixture(scope="module", autouse=True)
def temporary_prefect_server():
    with prefect_harness():
        yield


# the teacher fakes answer with the real result type of factrl.signatures.pseudo_answers
Answer = PseudoAnswer


class Killed(RuntimeError):
    """The fake teacher process died."""


class FakeTeacher:
    """Answers a question with the gold answer found in the evidence; 'None' for unanswerable ones,
    garbage for questions containing 'garble'. Records every conversation it receives."""

    model_name = "fake-teacher"

    def __init__(self, die_after: int | None = None):
        self.seen: list[str] = []
        self.die_after = die_after
        self._lock = threading.Lock()

    def chat(self, conversations, params):
        with self._lock:  # a batched call is all or nothing, as one forward pass is
            if self.die_after is not None and len(self.seen) + len(conversations) > self.die_after:
                raise Killed("teacher died")
            self.seen.extend(conv[-1]["content"] for conv in conversations)
        out = []
        for conv in conversations:
            text = conv[-1]["content"]
            if "garble" in text:
                reply = "###"
            elif "unanswerable" in text:
                reply = "ANSWER: None"
            else:
                reply = "ANSWER: " + text.split("EVIDENCE:")[1].split("|")[0].strip()[:40]
            out.append([Completion(text=reply, prompt_tokens=len(text.split()), completion_tokens=len(reply.split()))])
        return out

    def complete_tokens(self, prompts, params):
        raise NotImplementedError


def fake_pseudo_answers(llm, items, *, retries=2, params=None):
    """The signature's contract on a trivial prompt: parse 'ANSWER: x', retry garbage, None -> None."""
    from factrl.llm.base import SamplingParams

    convs = [[{"role": "user", "content": f"Q: {it['question']} EVIDENCE: {' | '.join(it['evidence'])}"}] for it in items]
    outs = llm.chat(convs, SamplingParams(max_tokens=16, temperature=0.0))
    answers = []
    for comps in outs:
        raw = comps[0].text
        if not raw.startswith("ANSWER:"):
            answers.append(Answer(None, None, False, f"no ANSWER field after {retries} retries", raw))
            continue
        value = raw.removeprefix("ANSWER:").strip()
        answers.append(Answer(None, None if value == "None" else value, True, None, raw))
    return answers


@pytest.fixture(scope="module")
def claims():
    return generate_claims(WorldParams(seed=5, num_passages=200, num_claims=24, hops=(2, 3)))


def rollout_fn(table_rows):
    """Three questions per claim; every 6th claim asks nothing, some ask unanswerable/garbled ones."""
    out = []
    for c in table_rows:
        n = int(c["id"][-3:])
        if n % 6 == 0:
            out.append([])
        elif n % 5 == 0:
            out.append([f"unanswerable question {n}?"])
        elif n % 7 == 0:
            out.append([f"garble {n}?"])
        else:
            out.append([h["question"] for h in c["hops"]])
    return out


def run_round(claims, tmp_path, teacher, work="work", rnd=None, batch_size=3, concurrency=2):
    params = SynthesizeParams(batch_size=batch_size, concurrency=concurrency, retries=0, seed=3)
    rnd = rnd or RoundParams(id=2, prev=1, segment="seg1", questions="all")
    return recipe.synthesize_round(
        claims, rnd, params, rollout_fn=rollout_fn, teacher=teacher, agent_checkpoint="models/reason_1",
        passages={}, work_dir=tmp_path / work, cache_path=tmp_path / work / "cache.sqlite",
        answer_fn=fake_pseudo_answers, answer_type=Answer, p_hash="h0")


def test_round_outputs_filtering_and_failures(claims, tmp_path):
    teacher = FakeTeacher()
    qa, rejected, summary = run_round(claims, tmp_path, teacher)
    n = claims.num_rows
    reasons = [r["reason"] for r in rejected.to_pylist()]
    assert qa.num_rows + len(reasons) == n  # every claim accounted for
    assert summary["no_question"] == reasons.count("no_question") > 0
    assert summary["none"] == reasons.count("none") > 0
    # teacher failures are recorded with their error, not dropped
    errors = [r for r in rejected.to_pylist() if r["reason"] == "teacher_error"]
    assert errors and all("no ANSWER field" in r["error"] for r in errors)
    assert summary["none_rate"] == pytest.approx(summary["none"] / (summary["questions"] - summary["teacher_errors"]))
    # one question per claim, the gold hop answers known, provenance on every row
    rows = qa.to_pylist()
    assert len({r["claim_id"] for r in rows}) == qa.num_rows
    assert all(r["gold_answer"] for r in rows)
    assert {(r["round"], r["agent_checkpoint"], r["teacher_model"], r["prompt_hash"]) for r in rows} == {
        (2, "models/reason_1", "fake-teacher", "h0")}
    assert summary["usage"]["teacher_calls"] == len(teacher.seen) == summary["questions"]
    assert summary["usage"]["prompt_tokens"] > 0


def test_first_mode_uses_first_question(claims, tmp_path):
    rnd = RoundParams(id=1, prev=0, segment="all", questions="first")
    qa, _, _ = run_round(claims, tmp_path, FakeTeacher(), rnd=rnd)
    by_id = {c["id"]: c for c in claims.to_pylist()}
    for r in qa.to_pylist():
        assert r["question"] == by_id[r["claim_id"]]["hops"][0]["question"]


def test_kill_midway_then_rerun_loses_nothing_and_repeats_no_call(claims, tmp_path):
    reference, ref_rej, _ = run_round(claims, tmp_path, FakeTeacher(), work="ref")

    dying = FakeTeacher(die_after=7)
    with pytest.raises(TeacherBatchError, match="Killed"):
        run_round(claims, tmp_path, dying, work="run")
    assert 0 < len(dying.seen) < ref_rej.num_rows + reference.num_rows

    fresh = FakeTeacher()
    qa, rejected, summary = run_round(claims, tmp_path, fresh, work="run")
    assert not set(dying.seen) & set(fresh.seen)  # nothing asked twice
    assert len(dying.seen) + len(fresh.seen) == summary["questions"]  # nothing lost
    assert summary["usage"]["batches_resumed"] > 0
    assert qa.equals(reference) and rejected.equals(ref_rej)  # same as an uninterrupted run

    again = FakeTeacher()
    qa2, _, summary2 = run_round(claims, tmp_path, again, work="run")
    assert again.seen == [] and summary2["usage"]["teacher_calls"] == 0 and qa2.equals(reference)


def test_round_chain_and_limit(claims):
    rounds = (RoundParams(1, 0, "all", "first"), RoundParams(2, 1, "seg1"), RoundParams(3, 2, "seg2"))
    assert find_round(rounds, 3).segment == "seg2"
    with pytest.raises(ValueError, match="prev 5 is not an earlier round"):
        find_round(rounds + (RoundParams(4, 5, "seg3"),), 4)
    small = balanced_subset(claims, 8)
    assert small.num_rows == 8
    labels = small.column("label").to_pylist()
    assert labels.count("SUPPORTS") == labels.count("REFUTES") == 4


def test_world_teacher_backend_answers_from_the_gold_chain(claims, tmp_path):
    """`teacher.backend: world` through the same fan-out: right answers for the chain's questions in
    the agent's wordings, None for questions about nothing in the chain, both in the summary."""
    from factrl.recipes.teacher import open_teacher
    from factrl.recipes.teacher_params import TeacherParams

    def asking(rows):
        out = []
        for c in rows:
            n = int(c["id"][-3:])
            hop = c["hops"][n % len(c["hops"])]
            name = hop["question"].split(" ")[-1].rstrip("?")  # a one-word subject, or the template
            out.append(["Is legend of earth the same as demon wanderers?"] if n % 4 == 0
                       else [hop["question"] if n % 2 else f"Tell me who or what is behind {name}, please"])
        return out

    params = SynthesizeParams(teacher=TeacherParams(backend="world"), batch_size=4, concurrency=2, retries=0, seed=3)
    with open_teacher(params.teacher) as teacher:
        qa, rejected, summary = recipe.synthesize_round(
            claims, RoundParams(id=1, prev=0, segment="all", questions="first"), params, rollout_fn=asking,
            teacher=teacher, agent_checkpoint="models/reason_0", passages={}, work_dir=tmp_path / "w",
            cache_path=tmp_path / "w" / "cache.sqlite")
    rows = qa.to_pylist()
    assert rows and all(r["answer"] == r["gold_answer"] for r in rows)
    assert summary["teacher_model"] == "world-chain" and summary["teacher_backend"] == "world"
    assert summary["gold_answer_accuracy"] == 1.0 and summary["teacher_errors"] == 0
    nones = [r for r in rejected.to_pylist() if r["reason"] == "none"]
    assert any("legend of earth" in r["question"] for r in nones)
    assert summary["none_rate"] == pytest.approx(len(nones) / summary["questions"])
    assert summary["usage"]["teacher_calls"] == 0  # nothing generated


def test_rollouts_run_on_the_endpoints_params_name(demo_world, monkeypatch):
    """synthesize.reason_endpoint / search_endpoint send H_prev / L_prev to the endpoints serving
    them, under their checkpoint paths as served names; empty keeps them in-process."""
    from factrl.llm import backends

    loaded = []
    monkeypatch.setattr(backends, "load_llm", lambda spec, **kw: loaded.append(spec) or object())
    index = demo_world[1]
    recipe.haris_rollout_fn("models/reason_1", "models/search_1", index, SynthesizeParams(retrieval_mode="bm25"), "first")
    assert loaded == ["models/reason_1", "models/search_1"]
    loaded.clear()
    params = SynthesizeParams(retrieval_mode="bm25", reason_endpoint="http://h:8001/v1",
                              search_endpoint="http://h:8002/v1")
    recipe.haris_rollout_fn("models/reason_1", "models/search_1", index, params, "first")
    assert loaded == ["openai:models/reason_1@http://h:8001/v1", "openai:models/search_1@http://h:8002/v1"]
