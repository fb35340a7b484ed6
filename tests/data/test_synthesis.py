"""Question sampling (HARIS A.4), gold-evidence pairing, None filtering and provenance."""

from __future__ import annotations

import pytest

from factrl.data import synthesis
from factrl.data.schemas import QA_PAIRS
from factrl.signatures import PseudoAnswer

# the teacher fakes answer with the real result type of factrl.signatures.pseudo_answers
Answer = PseudoAnswer


def test_first_mode_takes_first_question():
    assert synthesis.sample_question("c1", ["  Who made X? ", "Where is Y?"], "first", 0) == "Who made X?"
    assert synthesis.sample_question("c1", [], "first", 0) is None
    assert synthesis.sample_question("c1", ["", "  "], "all", 0) is None


def test_all_mode_samples_every_question_and_is_seeded():
    qs = ["Q1?", "Q2?", "Q3?"]
    picks = {synthesis.sample_question(f"c{i}", qs, "all", 5) for i in range(60)}
    assert picks == set(qs)  # over many claims every question gets picked
    assert synthesis.sample_question("c7", qs, "all", 5) == synthesis.sample_question("c7", qs, "all", 5)
    # the draw depends on the claim id, not on the claim's position
    a = synthesis.sample_questions(["a", "b"], [qs, qs], "all", 5)
    b = synthesis.sample_questions(["b", "a"], [qs, qs], "all", 5)
    assert a == b[::-1]
    with pytest.raises(ValueError, match="mode"):
        synthesis.sample_question("c", qs, "some", 0)


def test_gold_evidence_preference():
    passages = {"p1": "Alpha: text one", "p2": "Beta: text two"}
    world = {"evidence_ids": ["p1", "p2"], "evidence": ["x"], "explanation": "why", "source": "world"}
    assert synthesis.gold_evidence(world, passages) == ["Alpha: text one", "Beta: text two"]
    exfever = {"evidence_ids": None, "evidence": ["Title A", "Title B"], "explanation": "A did B.", "source": "exfever_2hop"}
    assert synthesis.gold_evidence(exfever, passages) == ["A did B."]
    hover = {"evidence_ids": None, "evidence": ["Sentence one."], "explanation": None, "source": "hover"}
    assert synthesis.gold_evidence(hover, passages) == ["Sentence one."]
    assert synthesis.gold_evidence({"evidence": [], "explanation": None, "source": "x"}, passages) == []


def claim(i, hops=None):
    return {"id": f"c{i}", "claim": f"Claim {i}.", "label": "SUPPORTS" if i % 2 else "REFUTES",
            "evidence": [f"ev {i}"], "evidence_ids": None, "explanation": None, "source": "world",
            "hops": hops}


def test_assemble_filters_none_records_failures_and_provenance():
    hops = [{"question": "Who founded Kalo Works?", "answer": "Mira Tosh", "passage_ids": ["p1"]}]
    claims = [claim(0, hops), claim(1), claim(2), claim(3)]
    work, unasked = synthesis.build_items(claims, ["who founded kalo works", "Q1?", "Q2?", None], None)
    assert [w["item"]["question"] for w in work] == ["who founded kalo works", "Q1?", "Q2?"]
    # the gold chain goes with the item where the claim has one (what the world teacher reads)
    assert set(work[0]["item"]) == {"claim", "label", "evidence", "question", "hops"}
    assert set(work[1]["item"]) == {"claim", "label", "evidence", "question"}
    answers = [Answer("r", "It was Mira Tosh.", True, None, ""), Answer("r", None, True, None, "None"),
               Answer(None, None, False, "unparseable after 2 retries", "garbage")]
    prov = synthesis.Provenance(2, "models/reason_1", "teacher-x", "abc123")
    qa, rejected, stats = synthesis.assemble(work, answers, unasked, prov)
    assert qa.schema.equals(QA_PAIRS)
    assert qa.num_rows == 1
    row = qa.to_pylist()[0]
    assert row["answer"] == "It was Mira Tosh." and row["gold_answer"] == "Mira Tosh"
    assert (row["round"], row["agent_checkpoint"], row["teacher_model"], row["prompt_hash"]) == (2, "models/reason_1", "teacher-x", "abc123")
    reasons = {r["claim_id"]: (r["reason"], r["error"]) for r in rejected.to_pylist()}
    assert reasons == {"c1": ("none", None), "c2": ("teacher_error", "unparseable after 2 retries"), "c3": ("no_question", None)}
    assert stats["none_rate"] == pytest.approx(0.5)  # 1 None of 2 valid teacher answers
    assert stats["teacher_errors"] == 1 and stats["no_question"] == 1 and stats["kept"] == 1
    assert stats["gold_answer_accuracy"] == 1.0


def test_literal_none_string_is_filtered():
    work, _ = synthesis.build_items([claim(1)], ["Q?"], None)
    qa, rejected, stats = synthesis.assemble(work, [Answer(None, "None.", True, None, "")], [], synthesis.Provenance(1, "a", "t", "h"))
    assert qa.num_rows == 0 and rejected.to_pylist()[0]["reason"] == "none"
    with pytest.raises(ValueError, match="2 teacher answers for 1"):
        synthesis.assemble(work, [Answer(None, "x", True, None, "")] * 2, [], synthesis.Provenance(1, "a", "t", "h"))
