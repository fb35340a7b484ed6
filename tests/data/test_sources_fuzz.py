"""Bad input, property-based: claim and passage files (JSONL and Parquet) with wrong types, missing
fields, duplicate ids, empty text, invalid UTF-8, huge and non-object lines. The readers of
factrl.data.sources either return a table valid under the schema or raise a DataError naming the
file (and, where one is at fault, the row and field); no other exception escapes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from factrl.data import sources
from factrl.data.schemas import CLAIMS, PASSAGES, DataError
from tests.fuzz import json_values, tried

FIELDS = {"claims": ("id", "claim", "label", "num_hops", "evidence", "evidence_ids", "explanation", "source",
                     "hops", "split"),
          "passages": ("id", "title", "text", "source")}
READERS = {"claims": sources.read_claims, "passages": sources.read_passages}
SCHEMAS = {"claims": CLAIMS, "passages": PASSAGES}
GOOD = {"claims": {"id": "c0", "claim": "Varna is in Bulgaria.", "label": "SUPPORTS", "num_hops": 2, "source": "s"},
        "passages": {"id": "p0", "title": "Varna", "text": "Varna is a city in Bulgaria.", "source": "s"}}
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def record(kind: str):
    """A good record of ``kind`` with some fields dropped and some replaced by any JSON value."""
    fields = st.sampled_from(FIELDS[kind])
    return st.tuples(st.sets(fields), st.dictionaries(fields, json_values, max_size=4)).map(
        lambda t: {**{k: v for k, v in GOOD[kind].items() if k not in t[0]}, **t[1]})


def lines(kind: str):
    """JSONL lines: good, mutated, blank, huge, non-object or broken records, invalid UTF-8."""
    one = st.one_of(
        record(kind).map(lambda r: json.dumps(r).encode()),
        st.just(b""), st.just(b"   "), st.just(b"[1, 2]"), st.just(b'"text"'), st.just(b"{broken"),
        st.just(json.dumps({**GOOD[kind], "id": "dup"}).encode()),  # twice in a file = a duplicate id
        st.just(json.dumps({**GOOD[kind], "text": "x" * 300_000, "claim": "y" * 300_000}).encode()),
        st.binary(max_size=12).map(lambda b: b'{"id": "' + b + b'"}'),  # raw bytes, often invalid UTF-8
    )
    return st.lists(one, min_size=1, max_size=8)


def check(kind: str, path: Path) -> None:
    """The property: a valid table or a DataError naming ``path``; nothing else."""
    try:
        table = READERS[kind](path)
    except DataError as err:
        assert str(path) in str(err) and err.problem, err
        return
    assert table.schema.equals(SCHEMAS[kind])
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "duplicate ids read without an error"
    text = "claim" if kind == "claims" else "text"
    assert all(t.strip() for t in table.column(text).to_pylist())


@pytest.mark.parametrize("kind", ["claims", "passages"])
@FUZZ
@given(data=st.data())
def test_jsonl_readers_raise_only_data_errors(kind, data):
    body = b"\n".join(data.draw(lines(kind)))
    tried(f"sources.read_{kind}.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{kind}.jsonl"
        path.write_bytes(body)
        check(kind, path)


def column(values: list):
    """An arrow column of ``values`` when arrow can type them (mixed lists it cannot are skipped)."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        return None


@pytest.mark.parametrize("kind", ["claims", "passages"])
@FUZZ
@given(data=st.data())
def test_parquet_readers_raise_only_data_errors(kind, data):
    rows = data.draw(st.lists(record(kind), min_size=1, max_size=5))
    names = sorted({k for r in rows for k in r})
    columns = {n: column([r.get(n) for r in rows]) for n in names}
    table = pa.table({n: c for n, c in columns.items() if c is not None})
    tried(f"sources.read_{kind}.parquet")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{kind}.parquet"
        try:
            pq.write_table(table, path)
        except pa.ArrowNotImplementedError:  # a type Parquet cannot hold (an empty struct): no such file
            assume(False)
        check(kind, path)


def test_a_map_column_is_a_data_error_naming_it(tmp_path):
    """Arrow refuses to cast a map to a list with ArrowTypeError, which validate once let through."""
    path = tmp_path / "claims.parquet"
    evidence = pa.array([[("a", 1)]], type=pa.map_(pa.string(), pa.int64()))
    pq.write_table(pa.table({"id": ["c"], "claim": ["x"], "label": ["SUPPORTS"], "source": ["s"],
                             "evidence": evidence}), path)
    with pytest.raises(DataError, match=r"claims.parquet, row 0, field 'evidence': expected list<item: string>"):
        sources.read_claims(path)


def test_unreadable_and_truncated_parquet_are_data_errors(tmp_path):
    good = tmp_path / "good.parquet"
    pq.write_table(pa.Table.from_pylist([{**GOOD["passages"], "source": "s"}], schema=PASSAGES), good)
    for name, data in (("garbage.parquet", b"PAR1 not really"), ("cut.parquet", good.read_bytes()[:-20]),
                       ("empty.parquet", b"")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataError, match=name):
            sources.read_passages(tmp_path / name)


@pytest.mark.parametrize("kind", ["claims", "passages"])
def test_duplicate_ids_name_both_rows(kind, tmp_path):
    path = tmp_path / f"{kind}.jsonl"
    rows = [{**GOOD[kind], "id": "a"}, {**GOOD[kind], "id": "b"}, {**GOOD[kind], "id": "a"}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(DataError, match=r"row 2, field 'id': duplicate id 'a' \(first at row 0\)"):
        READERS[kind](path)
    schema = SCHEMAS[kind]
    table = pa.Table.from_pylist([{**GOOD[kind], "id": i, "source": "s"} for i in ("a", "b", "a")], schema=schema)
    pq.write_table(table, tmp_path / f"{kind}.parquet")
    with pytest.raises(DataError, match=r"row 2, field 'id': duplicate id 'a' \(first at row 0\)"):
        READERS[kind](tmp_path / f"{kind}.parquet")


@pytest.mark.parametrize(("field", "value"), [("evidence_ids", 5), ("explanation", {"a": 1}), ("hops", "x"),
                                              ("num_hops", 2**40)])
def test_a_value_arrow_cannot_convert_names_its_row_and_field(field, value, tmp_path):
    path = tmp_path / "claims.jsonl"
    path.write_text(json.dumps(GOOD["claims"]) + "\n\n" + json.dumps({**GOOD["claims"], "id": "c1", field: value}))
    with pytest.raises(DataError, match=rf"claims.jsonl, row 2, field '{field}'"):
        sources.read_claims(path)
