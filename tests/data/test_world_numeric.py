"""MARCH's numeric questions about the demo world (``factrl.data.world_numeric``)."""

from __future__ import annotations

import pytest

from factrl.data.params import WorldParams
from factrl.data.world_build import build_world
from factrl.data.world_entities import World
from factrl.data.world_numeric import NOT_IN_DOCUMENTS, NUMERIC_FACTS, numeric_questions
from factrl.text import extract_numbers

PARAMS = WorldParams(seed=7, num_passages=3000, num_claims=240, hops=(2, 3, 4))


@pytest.fixture(scope="module")
def world() -> World:
    return build_world(PARAMS)


def test_numeric_questions_ask_numbers_their_passage_states(world):
    rows = numeric_questions(PARAMS, 120, num_documents=3, seed=1)
    assert len({r["id"] for r in rows}) == 120 and len({r["question"] for r in rows}) == 120
    assert {f.key for f in NUMERIC_FACTS} == {"year", "population", "tracks", "price", "minutes"}
    for r in rows:
        name = world.name(r["entity"])
        assert name in r["question"] and len(r["documents"]) == 3
        [own] = [d for d in r["documents"] if d["title"] == name]
        assert r["answer"] in extract_numbers(own["text"]), (r["question"], own["text"])
        assert extract_numbers(r["statement"]) == [r["answer"]]
        # the distractors are other entities of the same type
        assert {world.type_of(world.names.to_pylist().index(d["title"])) for d in r["documents"]} == \
            {world.type_of(r["entity"])}
    assert numeric_questions(PARAMS, 120, num_documents=3, seed=1) == rows
    assert numeric_questions(PARAMS, 120, num_documents=3, seed=2) != rows



def test_unanswerable_numeric_questions_lack_their_passage_and_leave_the_others_alone(world):
    plain = numeric_questions(PARAMS, 40, num_documents=3, seed=1)
    rows = numeric_questions(PARAMS, 40, num_documents=3, seed=1, unanswerable=0.25)
    missing = [r for r in rows if not r["answerable"]]
    assert len(missing) == 10 and all(r["answerable"] for r in plain)
    for r, p in zip(rows, plain):
        if r["answerable"]:
            assert r == p  # the same question, documents and answer as without the share
            continue
        name = world.name(r["entity"])
        assert r["question"] == p["question"] and r["answer"] == p["answer"]
        assert r["statement"] == NOT_IN_DOCUMENTS and not extract_numbers(r["statement"])
        assert len(r["documents"]) == 3 and name not in {d["title"] for d in r["documents"]}
        # a stand-in of the same type took the own passage's place; the distractors stayed
        assert {world.type_of(world.names.to_pylist().index(d["title"])) for d in r["documents"]} == \
            {world.type_of(r["entity"])}
        assert len({d["title"] for d in r["documents"]} & {d["title"] for d in p["documents"]}) == 2
    with pytest.raises(ValueError, match="unanswerable"):
        numeric_questions(PARAMS, 4, unanswerable=1.5)
