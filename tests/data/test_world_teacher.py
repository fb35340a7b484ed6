"""The world teacher: right answers from a claim's gold chain for the questions a reasoning agent
asks (the hop questions, the agent prompt's style, other wordings, two hops at once) and None for
questions about anything the chain does not state."""

from __future__ import annotations

import pytest

from factrl.data import world_teacher as wt
from factrl.data.params import WorldParams
from factrl.data.world_claims import generate_claims
from factrl.data.world_entities import RELATION

# Wordings of each relation's question about {x}, in the styles the reasoning agent writes them:
# the system prompt's example ("Who founded Orlen Studios?", "In which city was Ilse Parrow born?"),
# the claim's own nouns ("the developer of the game ..."), and plain paraphrases.
WORDINGS = {
    "born_in": ["In which city was {x} born?", "Where was {x} born?", "What is the birthplace of the person {x}?",
                "Which city is {x} from?"],
    "located_in": ["In which country does {x} lie?", "Which country is the city {x} in?",
                   "What country is {x} located in?", "Where is {x}?"],
    "founded_by": ["Who founded {x}?", "Who is the founder of the company {x}?", "Who established {x}?"],
    "headquartered_in": ["Where is {x} headquartered?", "What is the home city of {x}?",
                         "In which city is the company {x} based?", "Where is {x}?"],
    "directed_by": ["Who directed {x}?", "Who is the director of the film {x}?", "Who was {x} directed by?"],
    "produced_by": ["Which company produced {x}?", "Who is the producer of the film {x}?",
                    "What company is behind the production of {x}?"],
    "soundtrack": ["What is the soundtrack of {x}?", "Which album is the soundtrack of the film {x}?"],
    "recorded_by": ["Who recorded {x}?", "Who is the performer of the album {x}?", "Which artist recorded {x}?"],
    "developed_by": ["Which company developed {x}?", "Who is the developer of the game {x}?",
                     "Which studio made {x}?"],
}


@pytest.fixture(scope="module")
def claims() -> list[dict]:
    return generate_claims(WorldParams(seed=5, num_passages=300, num_claims=60, hops=(2, 3, 4))).to_pylist()


def _answer(claim: dict, question: str) -> str | None:
    return wt.answer_from_chain(claim["hops"], question)


def test_every_hop_question_and_wording_gets_the_hop_answer(claims):
    asked = 0
    for c in claims:
        for fact, hop in zip(wt.chain_facts(c["hops"]), c["hops"]):
            assert _answer(c, hop["question"]) == hop["answer"]
            for wording in WORDINGS[fact.relation]:
                for name in (fact.subject, fact.subject.lower()):
                    q = wording.format(x=name)
                    assert _answer(c, q) == hop["answer"], (c["claim"], q)
                    asked += 1
    assert asked > 500


def test_two_hops_in_one_question_follow_the_chain(claims):
    """The claim's own phrasing ("the home city of the developer of the game X") names two facts."""
    checked = 0
    for c in claims:
        facts = wt.chain_facts(c["hops"])
        for first, second in zip(facts, facts[1:]):
            outer, inner = RELATION[second.relation].noun, RELATION[first.relation].noun
            q = f"What is the {outer} of the {inner} of {first.subject}?"
            assert _answer(c, q) == second.answer, (c["claim"], q)
            checked += 1
    assert checked > 60
    example = next(c for c in claims
                   if [f.relation for f in wt.chain_facts(c["hops"])][:2] == ["founded_by", "born_in"])
    subject = wt.chain_facts(example["hops"])[0].subject
    assert _answer(example, f"Where was the founder of {subject} born?") == example["hops"][1]["answer"]


def test_questions_about_nothing_in_the_chain_get_none(claims):
    c = claims[0]
    facts = wt.chain_facts(c["hops"])
    first = facts[0]
    # a relation of another type than the subject's: never a fact of this subject
    foreign = next(r for r in RELATION.values() if r.src != RELATION[first.relation].src)
    final = c["hops"][-1]["answer"]
    for q in [
        "Who directed Zavopuk?",  # no entity of the chain
        f"Which company developed {final}?",  # the end of the chain has no passage in the evidence
        foreign.question.format(x=first.subject),  # a relation the subject cannot have
        f"What is {first.subject}?",  # names no relation and wants no kind of answer
        "Is legend of earth the same as demon wanderers?",
        "Who founded the company?",  # names nothing
        "",
    ]:
        assert _answer(c, q) is None, q
    # a relation of the subject's own type that the chain does not state (off the chain: None)
    for c in claims:
        for f in wt.chain_facts(c["hops"]):
            other = [r for r in RELATION.values() if r.src == RELATION[f.relation].src and r.name != f.relation]
            for r in other:
                assert _answer(c, r.question.format(x=f.subject)) is None, (c["claim"], r.name)


def test_pseudo_answers_contract(claims):
    c = claims[1]
    hop = c["hops"][0]
    items = [{"claim": c["claim"], "label": c["label"], "evidence": ["x"], "question": hop["question"],
              "hops": c["hops"]},
             {"claim": c["claim"], "label": c["label"], "evidence": ["x"], "question": "What is love?",
              "hops": c["hops"]},
             {"claim": "A HOVER claim.", "label": "SUPPORTS", "evidence": ["x"], "question": "Who?"}]
    right, none, outside = wt.pseudo_answers(None, items, retries=2)
    assert right.ok and right.answer == hop["answer"] and hop["answer"] in right.rationale
    assert none.ok and none.answer is None
    assert not outside.ok and "no gold chain" in outside.error
    bad = dict(items[0], hops=[{"question": "Who wrote Hamlet?", "answer": "Shakespeare", "passage_ids": []}])
    [failed] = wt.pseudo_answers(None, [bad])
    assert not failed.ok and "not a demo-world sub-question" in failed.error
    with pytest.raises(RuntimeError, match="no chat"):
        wt.WorldTeacher().chat([], None)


def test_two_readings_with_different_answers_get_none():
    hops = [{"question": "Where is Orlen Studios headquartered?", "answer": "Tessik", "passage_ids": ["p1"]},
            {"question": "In which country does Tessik lie?", "answer": "Varnia", "passage_ids": ["p2"]}]
    assert wt.answer_from_chain(hops, "Where is Orlen Studios?") == "Tessik"
    assert wt.answer_from_chain(hops, "Where is Tessik?") == "Varnia"
    assert wt.answer_from_chain(hops, "Where is Orlen Studios, and where is Tessik?") is None
    # the same answer both ways is no ambiguity
    assert wt.answer_from_chain(hops, "Is Tessik the home city of Orlen Studios?") == "Tessik"


def test_kind_hints_answer_only_a_fact_of_that_kind():
    hops = [{"question": "Who directed Kavelo?", "answer": "Dira Mokat", "passage_ids": ["p1"]},
            {"question": "In which city was Dira Mokat born?", "answer": "Tessik", "passage_ids": ["p2"]}]
    assert wt.answer_from_chain(hops, "Who made Kavelo?") == "Dira Mokat"  # the film's only person fact
    assert wt.answer_from_chain(hops, "Where is Dira Mokat from?") == "Tessik"
    assert wt.answer_from_chain(hops, "Which album is Kavelo?") is None  # no album fact in the chain
    assert wt.answer_from_chain(hops, "In which country was Dira Mokat born?") is None  # Tessik's country: not stated
