"""The demo world: determinism, balance, hidden bridges, hard negatives, evidence integrity."""

from __future__ import annotations

import collections

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from factrl.data import world as w
from factrl.data import world_build, world_claims, world_entities
from factrl.data.params import WorldParams
from factrl.data.schemas import CLAIMS, PASSAGES, validate

PARAMS = WorldParams(seed=7, num_passages=3000, num_claims=240, hops=(2, 3, 4))


@pytest.fixture(scope="module")
def claims() -> pa.Table:
    return world_claims.generate_claims(PARAMS)


@pytest.fixture(scope="module")
def passages() -> pa.Table:
    return pa.Table.from_batches(list(world_build.iter_passage_batches(PARAMS, batch_size=1000)))


@pytest.fixture(scope="module")
def world() -> world_entities.World:
    return world_build.build_world(PARAMS)


def _write(params: WorldParams, tmp_path, tag: str) -> tuple[bytes, bytes]:
    p, c = tmp_path / f"p{tag}.parquet", tmp_path / f"c{tag}.parquet"
    w.write_world(params, p, c)
    return p.read_bytes(), c.read_bytes()


def test_same_seed_same_bytes_different_seed_differs(tmp_path):
    small = WorldParams(seed=3, num_passages=500, num_claims=30)
    first = _write(small, tmp_path, "a")
    assert first == _write(small, tmp_path, "b")
    other = _write(WorldParams(seed=4, num_passages=500, num_claims=30), tmp_path, "c")
    assert first[0] != other[0] and first[1] != other[1]


def test_schemas_validate(claims, passages):
    validate(claims, CLAIMS, "claims")
    validate(passages, PASSAGES, "passages")
    assert passages.num_rows == PARAMS.num_passages
    assert passages.column("id")[0].as_py() == "w-p0000001"
    assert claims.column("id")[0].as_py() == "w-c000001"
    assert set(claims.column("source").to_pylist()) == {"world"}
    assert set(passages.column("source").to_pylist()) == {"world"}


def test_titles_are_unique(passages):
    titles = passages.column("title").to_pylist()
    assert len(set(titles)) == len(titles)


def test_labels_balanced_per_hop(claims):
    counts = collections.Counter(zip(claims.column("num_hops").to_pylist(), claims.column("label").to_pylist()))
    for h in PARAMS.hops:
        assert counts[(h, "SUPPORTS")] == counts[(h, "REFUTES")] == PARAMS.num_claims // len(PARAMS.hops) // 2


def test_hops_match_num_hops_and_evidence(claims):
    for row in claims.to_pylist():
        assert len(row["hops"]) == row["num_hops"]
        assert [h["passage_ids"][0] for h in row["hops"]] == row["evidence_ids"]
        assert len(row["evidence"]) == len(row["evidence_ids"])
        # each sub-question names the previous hop's actual entity
        for prev, hop in zip(row["hops"], row["hops"][1:]):
            assert prev["answer"] in hop["question"]


def test_bridging_entities_never_named(claims):
    for row in claims.to_pylist():
        for hop in row["hops"][:-1]:
            assert hop["answer"] not in row["claim"], row["claim"]


def test_supports_name_the_gold_answer(claims):
    for row in claims.to_pylist():
        gold = row["hops"][-1]["answer"]
        assert row["claim"].endswith(f" {gold}.") == (row["label"] == "SUPPORTS")


def test_refutes_swap_exactly_one_entity_of_same_type(claims, world):
    type_of = {name: world.type_of(i) for i, name in enumerate(world.names.to_pylist())}
    for row in claims.to_pylist():
        if row["label"] != "REFUTES":
            continue
        gold = row["hops"][-1]["answer"]
        stated = max((n for n in type_of if row["claim"].endswith(f" {n}.")), key=len)
        assert stated != gold and type_of[stated] == type_of[gold]
        # Putting the gold answer back gives the true claim: the only difference is that entity.
        true_text = row["claim"][: -len(stated) - 1] + gold + "."
        assert gold in true_text and stated not in true_text


def test_evidence_ids_exist_and_texts_match(claims, passages):
    text_by_id = dict(zip(passages.column("id").to_pylist(), passages.column("text").to_pylist()))
    for row in claims.to_pylist():
        for pid, text in zip(row["evidence_ids"], row["evidence"]):
            assert text_by_id[pid] == text
        # each hop's supporting passage states that hop's answer
        for hop in row["hops"]:
            assert hop["answer"] in text_by_id[hop["passage_ids"][0]]


def test_tiny_world_works(tmp_path):
    params = WorldParams(seed=1, num_passages=100, num_claims=60)
    stats = w.write_world(params, tmp_path / "p.parquet", tmp_path / "c.parquet")
    assert stats["num_passages"] == 100 and stats["num_claims"] == 60
    ids = set(pq.read_table(tmp_path / "p.parquet").column("id").to_pylist())
    claims = pq.read_table(tmp_path / "c.parquet")
    validate(claims, CLAIMS, "claims")
    assert all(pid in ids for ev in claims.column("evidence_ids").to_pylist() for pid in ev)


def test_batches_stream_in_order():
    params = WorldParams(seed=2, num_passages=250)
    batches = list(world_build.iter_passage_batches(params, batch_size=100))
    assert [b.num_rows for b in batches] == [100, 100, 50]
    whole = next(world_build.iter_passage_batches(params, batch_size=1000))
    assert pa.Table.from_batches(batches).equals(pa.Table.from_batches([whole]))


def test_relation_paths_cover_all_hop_counts():
    for h in (2, 3, 4):
        assert world_claims.relation_paths(h)
