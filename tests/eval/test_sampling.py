"""Stratified evaluation samples: balanced labels per hop, capped, seeded, order-independent."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from factrl.data.sources import read_claims_jsonl
from factrl.eval.sampling import stratified_sample


def _table(counts: dict[tuple[int | None, str], int]) -> pa.Table:
    rows = [{"id": f"{h}-{lab}-{i}", "label": lab, "num_hops": h}
            for (h, lab), n in counts.items() for i in range(n)]
    return pa.Table.from_pylist(rows, schema=pa.schema([("id", pa.string()), ("label", pa.string()),
                                                        ("num_hops", pa.int32())]))


def _counts(t: pa.Table) -> Counter:
    return Counter(zip(t.column("num_hops").to_pylist(), t.column("label").to_pylist()))


def test_balanced_and_capped_per_hop():
    t = _table({(2, "SUPPORTS"): 300, (2, "REFUTES"): 260, (3, "SUPPORTS"): 40, (3, "REFUTES"): 90,
                (None, "SUPPORTS"): 30})
    s = stratified_sample(t, per_hop=500, seed=0)
    assert _counts(s) == {(2, "SUPPORTS"): 250, (2, "REFUTES"): 250, (3, "SUPPORTS"): 40, (3, "REFUTES"): 40,
                          (None, "SUPPORTS"): 30}
    assert len(set(s.column("id").to_pylist())) == s.num_rows
    assert _counts(stratified_sample(t, per_hop=20, seed=0))[(2, "REFUTES")] == 10


def test_seeded_and_independent_of_row_order():
    t = _table({(2, "SUPPORTS"): 100, (2, "REFUTES"): 100})
    a = stratified_sample(t, 50, seed=1).column("id").to_pylist()
    assert a == stratified_sample(t.take(list(reversed(range(t.num_rows)))), 50, seed=1).column("id").to_pylist()
    assert a != stratified_sample(t, 50, seed=2).column("id").to_pylist()


def test_label_filter_and_errors():
    t = _table({(2, "SUPPORTS"): 10, (2, "REFUTES"): 10, (2, "NOT ENOUGH INFO"): 10})
    s = stratified_sample(t, 9, seed=0, labels=["SUPPORTS", "REFUTES"])
    assert _counts(s) == {(2, "SUPPORTS"): 4, (2, "REFUTES"): 4}
    with pytest.raises(ValueError, match="no 'num_hops' column"):
        stratified_sample(t.drop_columns(["num_hops"]), 10, seed=0)
    with pytest.raises(ValueError, match="per_hop must be >= 1"):
        stratified_sample(t, 0, seed=0)


def test_on_the_shared_exfever_sample(shared_data):
    claims = read_claims_jsonl(shared_data / "exfever_test_sample.jsonl")
    s = stratified_sample(claims, per_hop=100, seed=20240917, labels=["SUPPORTS", "REFUTES"])
    assert _counts(s) == {(2, "SUPPORTS"): 50, (2, "REFUTES"): 50, (3, "SUPPORTS"): 50, (3, "REFUTES"): 50}
