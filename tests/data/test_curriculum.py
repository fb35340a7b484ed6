"""Curriculum pieces: segments balanced by label x hops, M2R stages stratified or by hop count; all
partitions."""

from __future__ import annotations

from collections import Counter

import pytest

from factrl.data.curriculum import build_curriculum, counts, split_m2r, split_segments
from factrl.data.params import WorldParams
from factrl.data.world_claims import generate_claims


@pytest.fixture(scope="module")
def train():
    return generate_claims(WorldParams(seed=3, num_passages=300, num_claims=90, hops=(2, 3, 4)))


def test_segments_partition_and_balance(train):
    segs = split_segments(train, 3, seed=1)
    ids = [i for t in segs.values() for i in t.column("id").to_pylist()]
    assert sorted(ids) == sorted(train.column("id").to_pylist())  # every claim exactly once
    sizes = [t.num_rows for t in segs.values()]
    assert max(sizes) - min(sizes) <= 1
    full = counts(train)
    for t in segs.values():
        c = counts(t)
        for stratum, n in full.items():
            assert abs(c.get(stratum, 0) - n / 3) <= 1, (stratum, c)


def test_segments_seeded(train):
    a = split_segments(train, 3, seed=1)
    b = split_segments(train, 3, seed=1)
    c = split_segments(train, 3, seed=2)
    assert all(a[k].equals(b[k]) for k in a)
    assert any(not a[k].equals(c[k]) for k in a)


def test_m2r_stratified_stages_share_every_stratum(train):
    stages = split_m2r(train, 0.5, seed=1)
    s1, s2 = stages["m2r_stage1"], stages["m2r_stage2"]
    assert s1.num_rows + s2.num_rows == train.num_rows
    assert s1.num_rows == round(0.5 * train.num_rows)
    assert not set(s1.column("id").to_pylist()) & set(s2.column("id").to_pylist())
    c1, c2 = counts(s1), counts(s2)
    assert set(c1) == set(c2) == set(counts(train))  # every label x hops in both stages
    assert all(abs(c1[k] - c2[k]) <= 1 for k in c1)
    third = split_m2r(train, 1 / 3, seed=1)["m2r_stage1"]
    assert all(abs(n - total / 3) < 1 for n, total in
               zip(counts(third).values(), (counts(train)[k] for k in counts(third))))
    assert not split_m2r(train, 0.5, seed=2)["m2r_stage1"].equals(s1)  # seeded


def test_m2r_by_hops_stage1_has_fewest_hops_and_keeps_labels(train):
    stages = split_m2r(train, 0.5, seed=1, how="by_hops")
    s1, s2 = stages["m2r_stage1"], stages["m2r_stage2"]
    assert s1.num_rows + s2.num_rows == train.num_rows
    for label in ("SUPPORTS", "REFUTES"):
        h1 = [h for h, lab in zip(s1.column("num_hops").to_pylist(), s1.column("label").to_pylist()) if lab == label]
        h2 = [h for h, lab in zip(s2.column("num_hops").to_pylist(), s2.column("label").to_pylist()) if lab == label]
        assert max(h1) <= min(h2)  # fewer hops first, within each label
    l1, l2 = Counter(s1.column("label").to_pylist()), Counter(s2.column("label").to_pylist())
    assert abs(l1["SUPPORTS"] - l1["REFUTES"]) <= 1 and abs(l2["SUPPORTS"] - l2["REFUTES"]) <= 1


def test_build_curriculum_names_and_errors(train):
    pieces = build_curriculum(train, 2, 0.5, seed=0)
    assert list(pieces) == ["all", "seg1", "seg2", "m2r_stage1", "m2r_stage2"]
    assert pieces["all"].num_rows == train.num_rows
    with pytest.raises(ValueError, match="segments must be at least 1"):
        split_segments(train, 0, 0)
    with pytest.raises(ValueError, match="m2r_stage1_fraction"):
        split_m2r(train, 1.0, 0)
    with pytest.raises(ValueError, match="curriculum.m2r_split: unknown split 'easy_first'"):
        build_curriculum(train, 2, 0.5, seed=0, m2r_split="easy_first")
