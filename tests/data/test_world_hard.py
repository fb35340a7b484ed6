"""The hard demo world (WorldDifficulty): namesakes told apart, labels true by construction, near-miss
refutations, wordings kept apart between the warm start and the held-out set, the clean world unchanged."""

from __future__ import annotations

import dataclasses
import hashlib
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from factrl.data import world as w
from factrl.data import world_build, world_claims, world_entities, world_hard
from factrl.data.params import WorldDifficulty, WorldParams
from factrl.data.schemas import CLAIMS
from factrl.data.splits import stratified_split
from factrl.data.world_teacher import answer_from_chain, chain_facts
from factrl.data.world_wordings import MAX_WORDINGS, question_wordings, relation_wording

HARD = WorldDifficulty(homonyms=0.3, wordings=3, heldout_wordings=1, near_miss=0.5, cross_mentions=0.3)
PARAMS = WorldParams(seed=13, num_passages=2000, num_claims=300, difficulty=HARD)


@pytest.fixture(scope="module")
def world() -> world_entities.World:
    return world_build.build_world(PARAMS)


@pytest.fixture(scope="module")
def generated():
    claims, variants = world_claims.generate_claims_with_variants(PARAMS)
    return claims.to_pylist(), variants


def _wording_of(question: str) -> int:
    for wording in range(MAX_WORDINGS):
        for rel in world_entities.RELATIONS:
            head, tail = relation_wording(rel, wording).question.split("{x}")
            if question.startswith(head) and question.endswith(tail):
                return wording
    raise AssertionError(f"{question!r} is no wording's sub-question")


def test_the_clean_world_is_unchanged():
    """Default knobs: the same bytes as before the hard world existed (a digest of its claims)."""
    claims = world_claims.generate_claims(WorldParams(seed=3, num_passages=500, num_claims=30))
    assert world_claims.generate_claims_with_variants(WorldParams(seed=3, num_passages=500, num_claims=30))[1] is None
    passages = pa.Table.from_batches(list(world_build.iter_passage_batches(WorldParams(seed=3, num_passages=500))))
    # digests computed with the generator as it was before WorldDifficulty (75a8741)
    assert hashlib.sha256(str(claims.to_pylist()).encode()).hexdigest()[:16] == "5be1a904e523a4d5"
    assert hashlib.sha256(str(passages.to_pylist()).encode()).hexdigest()[:16] == "431e1da97c193086"


def test_namesakes_are_titled_apart_and_resolvable_from_their_passages(world):
    titles = world.names.to_pylist()
    assert len(set(titles)) == len(titles)  # every passage title still names one entity
    pairs = [(int(a), int(b)) for a, b in enumerate(world.twin) if b > a]
    assert len(pairs) >= 0.25 * len(world) / 2
    texts = world_build.entity_passages(world, [i for p in pairs for i in p])
    qualified = 0
    for a, b in pairs:
        assert world_hard.base_word(world.base_names[a], world.type_of(a)) == world_hard.base_word(world.base_names[b], world.type_of(b))
        # each passage names its namesake, so a reader can tell which one it holds
        assert f"Not to be confused with {world.name(b)}" in texts[a]
        assert f"Not to be confused with {world.name(a)}" in texts[b]
        if world.base_names[a] == world.base_names[b]:  # the same words: the titles must differ
            qualified += 1
            assert world.is_qualified(a) and world.is_qualified(b)
            assert world.name(a) != world.name(b) and re.search(r" \([^)]+\)$", world.name(a))
            assert world_claims.mention(world, a) != world_claims.mention(world, b)
            assert "(" not in world_claims.mention(world, a)  # a claim tells it apart as a person would
    assert qualified >= 0.2 * len(pairs)


def test_every_label_is_true_by_construction(world, generated):
    claims, variants = generated
    by_title = {t: i for i, t in enumerate(world.names.to_pylist())}
    for claim, variant in zip(claims, variants):
        facts = chain_facts(claim["hops"])
        entity = by_title[facts[0].subject]
        for fact in facts:  # each hop is a true edge of the world, each from the answer before it
            assert by_title[fact.subject] == entity
            entity = int(world.targets[fact.relation][entity])
            assert world.name(entity) == fact.answer
        gold_end = facts[-1].answer
        text = claim["claim"]
        if claim["label"] == "SUPPORTS":
            assert gold_end in text
        else:
            assert gold_end not in text
        # the claim is the chain, said in its wording: the start's mention and the end
        assert world_claims.mention(world, by_title[facts[0].subject])[4:] in text or world_claims.mention(world, by_title[facts[0].subject]) in text.lower()
        assert variant["wording"] == _wording_of(claim["hops"][0]["question"])


def test_refutations_are_near_misses_where_drawn(world, generated):
    claims, variants = generated
    by_title = {t: i for i, t in enumerate(world.names.to_pylist())}
    near = [(c, v) for c, v in zip(claims, variants) if v["near_miss"]]
    refutes = sum(c["label"] == "REFUTES" for c in claims)
    assert near and len(near) >= 0.3 * refutes
    assert all(c["label"] == "REFUTES" for c, _ in near)
    close = 0
    for claim, _ in near:
        gold = by_title[claim["hops"][-1]["answer"]]
        stated = [t for t in by_title if t in claim["claim"] and world.type_of(by_title[t]) == world.type_of(gold)]
        assert stated, claim["claim"]
        end = by_title[max(stated, key=len)]
        assert end != gold and world.type_of(end) == world.type_of(gold)
        namesake = int(world.twin[gold]) == end
        in_evidence = any(world.name(end) in e for e in claim["evidence"])
        close += namesake or in_evidence
    assert close >= 0.5 * len(near)  # the rest: a neighbour's fact one hop off


def test_wordings_of_the_warm_start_and_the_heldout_set_are_disjoint(generated):
    claims, variants = generated
    heldout = HARD.wordings - HARD.heldout_wordings
    # the question wordings are told apart by their words alone
    for rel in world_entities.RELATIONS:
        assert len(set(question_wordings(rel))) == MAX_WORDINGS
    splits = stratified_split(pa.Table.from_pylist(claims, schema=CLAIMS), (0.7, 0.1, 0.2), 7)
    sets = w.variant_sets(splits, variants)
    by_id = {v["id"]: v for v in variants}
    warm = sets["warm"].to_pylist()
    assert 0.15 * splits["train"].num_rows < len(warm) < splits["train"].num_rows
    for claim in warm:
        v = by_id[claim["id"]]
        assert v["wording"] == 0 and not v["start_namesake"] and not v["near_miss"]
        assert {_wording_of(h["question"]) for h in claim["hops"]} == {0}
    for claim in claims:  # no generated claim uses a held-out wording
        assert _wording_of(claim["hops"][0]["question"]) < heldout
    held = sets["heldout_wording"].to_pylist()
    assert [c["id"] for c in held] == splits["eval"].column("id").to_pylist()
    for claim, original in zip(held, splits["eval"].to_pylist()):
        assert {_wording_of(h["question"]) for h in claim["hops"]} == {heldout}
        assert claim["claim"] != original["claim"] and claim["label"] == original["label"]
        assert [h["answer"] for h in claim["hops"]] == [h["answer"] for h in original["hops"]]


def test_a_heldout_relation_combination_leaves_every_training_split():
    small = dataclasses.replace(PARAMS, num_passages=800, num_claims=150,
                                difficulty=dataclasses.replace(HARD, heldout_combination="produced_by>founded_by"))
    claims, variants = world_claims.generate_claims_with_variants(small)
    # the claims themselves are those of the same world without the held-out pair: only the split moves
    same, _ = world_claims.generate_claims_with_variants(dataclasses.replace(small, difficulty=HARD))
    assert claims.equals(same)
    splits = stratified_split(claims, (0.7, 0.1, 0.2), 7)
    sets = w.variant_sets(splits, variants)
    held = sets["heldout_combination"].to_pylist()
    assert {c["num_hops"] for c in held} == {2, 3, 4}  # the pair occurs in chains of every length

    def relations(claim):  # the chain's relations, read back from its sub-questions
        return tuple(world_entities.parse_hop_question(h["question"])[0].name for h in claim["hops"])

    def follows(claim):
        rels = relations(claim)
        return ("produced_by", "founded_by") in set(zip(rels, rels[1:]))

    assert all(follows(c) for c in held)
    kept = [c for name in ("train", "dev", "eval", "warm", "heldout_wording") for c in sets[name].to_pylist()]
    assert kept and not any(follows(c) for c in kept)
    seen = {r for c in sets["train"].to_pylist() for r in relations(c)}
    assert {"produced_by", "founded_by"} <= seen  # each relation is still trained, only not in this order
    assert sum(sets[n].num_rows for n in ("train", "dev", "eval", "heldout_combination")) == claims.num_rows


def test_the_world_teacher_answers_every_wording_and_a_namesake_by_its_bare_name(generated):
    claims, _ = generated
    answered = 0
    for claim in claims:
        for hop in claim["hops"]:
            assert answer_from_chain(claim["hops"], hop["question"]) == hop["answer"]
            answered += 1
    assert answered > 2 * len(claims)
    claim = next(c for c in claims if re.search(r" \(\d{4} film\)$", c["hops"][0]["question"][:-1]))
    subject = chain_facts(claim["hops"])[0].subject
    bare = re.sub(r" \([^)]*\)$", "", subject)
    rel = world_entities.RELATION[chain_facts(claim["hops"])[0].relation]
    assert answer_from_chain(claim["hops"], rel.question.format(x=bare)) == claim["hops"][0]["answer"]


def test_knobs_are_validated():
    with pytest.raises(ValueError, match="homonyms"):
        WorldDifficulty(homonyms=1.5)
    with pytest.raises(ValueError, match="heldout_wordings"):
        WorldDifficulty(wordings=2, heldout_wordings=2)
    with pytest.raises(ValueError, match="wordings"):
        WorldDifficulty(wordings=4)
    with pytest.raises(ValueError, match="first>second"):
        WorldDifficulty(heldout_combination="produced_by")
    small = dataclasses.replace(PARAMS, num_passages=400, num_claims=12)
    for pair, message in (("produced_by>filmed_in", "unknown relation"), ("born_in>founded_by", "no chain follows")):
        with pytest.raises(ValueError, match=message):
            world_claims.generate_claims(dataclasses.replace(small, difficulty=WorldDifficulty(heldout_combination=pair)))


def test_same_knobs_same_world_other_knobs_other_world(tmp_path):
    small = dataclasses.replace(PARAMS, num_passages=400, num_claims=24)
    first = world_claims.generate_claims(small)
    assert first.equals(world_claims.generate_claims(small))
    other = world_claims.generate_claims(dataclasses.replace(small, difficulty=dataclasses.replace(HARD, homonyms=0.1)))
    assert not first.equals(other)
    assert np.array_equal(world_build.build_world(small).types, world_build.build_world(dataclasses.replace(small, difficulty=WorldDifficulty())).types)


@pytest.fixture(scope="module")
def crowded(tmp_path_factory):
    """(claims, BM25 retriever, world) of a hard world whose natural first queries are crowded out
    for 40% of the facts, and (claims, passages) of the same world without that knob."""
    from factrl.retrieval.index import Retriever, build_index

    d = tmp_path_factory.mktemp("crowded")
    params = dataclasses.replace(PARAMS, num_passages=600, num_claims=90,
                                 difficulty=dataclasses.replace(HARD, query_miss=0.4))
    w.write_world(params, d / "p.parquet", d / "c.parquet")
    w.write_world(dataclasses.replace(params, difficulty=HARD), d / "p0.parquet", d / "c0.parquet")
    build_index(d / "p.parquet", d / "index", embedder=None)
    return (pq.read_table(d / "c.parquet").to_pylist(), Retriever(d / "index", mode="bm25"), world_build.build_world(params),
            pq.read_table(d / "c0.parquet").to_pylist(), pq.read_table(d / "p0.parquet").to_pylist(),
            pq.read_table(d / "p.parquet").to_pylist())


def test_query_decoys_state_no_fact_and_change_nothing_else(crowded):
    claims, _, world, claims0, passages0, passages = crowded
    # the same claims, labels and chains; only passages gain decoy sentences
    strip = [{k: v for k, v in c.items() if k != "evidence"} for c in claims]
    assert strip == [{k: v for k, v in c.items() if k != "evidence"} for c in claims0]
    grown = 0
    decoy = r" Some sources discuss the (.+?) of (.+?) and what is known about that \1\."
    for before, after in zip(passages0, passages):
        assert re.sub(decoy, "", after["text"]) == before["text"]
        extra = re.findall(decoy, after["text"])
        grown += bool(extra)
        for noun, title in extra:
            assert title != after["title"]  # a decoy is about another entity
            assert noun in {r.noun for r in world_entities.RELATIONS}
    assert grown > 0.3 * len(passages)
    # the world teacher still answers every hop from the chain
    for claim in claims:
        for hop in claim["hops"]:
            assert answer_from_chain(claim["hops"], hop["question"]) == hop["answer"]


def test_query_decoys_make_the_natural_first_query_miss_and_the_title_alone_find_it(crowded):
    from factrl.data.reference import _search_queries

    claims, retriever, *_ = crowded
    jobs = [(set(h["passage_ids"]), _search_queries(*world_entities.parse_hop_question(h["question"])))
            for c in claims for h in c["hops"]]
    natural = retriever.search([q[0] for _, q in jobs], 3)
    alone = retriever.search([q[1] for _, q in jobs], 3)
    missed = [gold.isdisjoint(h.id for h in a) for (gold, _), a in zip(jobs, natural)]
    recovered = [not gold.isdisjoint(h.id for h in b) for (gold, _), b, m in zip(jobs, alone, missed) if m]
    assert 0.03 < sum(missed) / len(jobs) < 0.5  # sometimes, not always
    assert sum(recovered) >= 0.8 * len(recovered)  # ... and a second search by the title finds it


def test_search_references_requery_where_the_first_search_missed(crowded):
    from factrl.agents.tools import RetrieverTool
    from factrl.data.reference import world_references

    claims, retriever, *_ = crowded
    kept, _ = world_references(claims, RetrieverTool(retriever, k=3), max_searches=2)
    searches = [r for r in kept if r["agent"] == "search"]
    twice = [r for r in searches if sum(t["role"] == "env" for t in r["turns"]) == 2]
    assert twice and len(twice) < len(searches)
    for row in twice:
        model = [t["text"] for t in row["turns"] if t["role"] == "model"]
        assert "I will search again" in model[1]
