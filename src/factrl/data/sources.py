"""Readers for claim and passage sources: JSONL, Parquet and the Hugging Face hub.

Every reader returns a pyarrow table validated against ``schemas.CLAIMS`` or ``schemas.PASSAGES``
and raises :class:`~factrl.data.schemas.DataError` naming file, row and field on the first bad
record (malformed JSON, invalid UTF-8, missing or mistyped field, unknown label, empty claim,
an id seen before in the same file).

Labels are normalised per source to SUPPORTS / REFUTES / NOT ENOUGH INFO. HOVER's NOT_SUPPORTED
covers both refuted and unverifiable claims; the HARIS paper scores it as REFUTES (binary task).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from factrl.data.schemas import CLAIMS, PASSAGES, DataError, validate

LABEL_ALIASES = {
    "SUPPORTS": "SUPPORTS",
    "SUPPORTED": "SUPPORTS",  # HOVER
    "SUPPORT": "SUPPORTS",  # EX-FEVER
    "REFUTES": "REFUTES",
    "REFUTED": "REFUTES",
    "REFUTE": "REFUTES",  # EX-FEVER
    "NOT_SUPPORTED": "REFUTES",  # HOVER (binary: refuted or not enough info)
    "NOT ENOUGH INFO": "NOT ENOUGH INFO",
    "NOT_ENOUGH_INFO": "NOT ENOUGH INFO",
    "NEI": "NOT ENOUGH INFO",
}
# Numeric labels as the hub datasets encode them.
HUB_LABELS = {
    "hover": {0: "SUPPORTS", 1: "REFUTES"},  # hover: 0 = SUPPORTED, 1 = NOT_SUPPORTED
    "fever": {0: "SUPPORTS", 1: "REFUTES", 2: "NOT ENOUGH INFO"},
}


def known_label(value: Any) -> str | None:
    """The factrl label of a source label, or None where factrl has none."""
    return LABEL_ALIASES.get(value.strip().upper()) if isinstance(value, str) else None


def normalize_label(value: Any, file: str, row: int) -> str:
    """Map a source label (string or CHECKWHY-style boolean-ish) to the factrl label set."""
    label = known_label(value)
    if label is not None:
        return label
    raise DataError(file, row, "label", f"unknown label {value!r}; known: {sorted(LABEL_ALIASES)}")


# --------------------------------------------------------------------------------------------
# JSONL
# --------------------------------------------------------------------------------------------


def iter_jsonl(path: str | Path) -> Iterable[tuple[int, dict]]:
    """Yield ``(row, record)`` for each non-blank line; bad UTF-8 or JSON is a DataError."""
    path = Path(path)
    with path.open("rb") as fh:
        for row, raw in enumerate(fh):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(str(path), row, None, f"invalid UTF-8 at byte {exc.start}") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(str(path), row, None, f"malformed JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(record, dict):
                raise DataError(str(path), row, None, f"expected a JSON object, got {type(record).__name__}")
            yield row, record


def claim_record(record: dict, file: str, row: int, source: str | None = None) -> dict:
    """Map one shared-data-format claim record to the CLAIMS contract."""
    for name in ("id", "claim", "label"):
        if name not in record or record[name] is None:
            raise DataError(file, row, name, "required field is missing")
    if not isinstance(record["claim"], str):
        raise DataError(file, row, "claim", f"expected a string, got {type(record['claim']).__name__}")
    if not record["claim"].strip():
        raise DataError(file, row, "claim", "empty claim")
    hops = record.get("num_hops")
    if hops is not None and (isinstance(hops, bool) or not isinstance(hops, int)):
        raise DataError(file, row, "num_hops", f"expected an integer, got {hops!r}")
    evidence, evidence_ids = _evidence(record.get("evidence"), file, row)
    return {
        "id": str(record["id"]),
        "claim": record["claim"],
        "label": normalize_label(record["label"], file, row),
        "num_hops": hops,
        "evidence": evidence,
        "evidence_ids": evidence_ids or record.get("evidence_ids"),
        "explanation": record.get("explanation"),
        "source": source or _source_name(record.get("source"), file),
        "hops": record.get("hops"),
        "split": record.get("split") if isinstance(record.get("split"), str) else None,
    }


def _evidence(value: Any, file: str, row: int) -> tuple[list[str] | None, list[str] | None]:
    """Evidence items may be strings or ``{title, text, passage_id, ...}`` objects."""
    if value is None:
        return None, None
    if not isinstance(value, list):
        raise DataError(file, row, "evidence", f"expected a list, got {type(value).__name__}")
    texts, ids = [], []
    for item in value:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict):
            text = item.get("text") or item.get("title")
            if text is not None:
                texts.append(str(text))
            pid = item.get("passage_id") or item.get("id")
            if pid is not None:
                ids.append(str(pid))
        else:
            raise DataError(file, row, "evidence", f"unexpected evidence item {item!r}")
    return texts, ids or None


def _source_name(value: Any, file: str) -> str:
    """A short source name: the dataset file stem (``hover_2hop``) rather than repo@commit."""
    return Path(file).stem if not value or "@" in str(value) else str(value)


def read_claims_jsonl(path: str | Path, source: str | None = None,
                      keep_labels: Collection[str] | None = None) -> pa.Table:
    """Read a shared-data-format claim file (see ../shared/data/README.md).

    ``keep_labels`` (factrl labels, e.g. ``{"SUPPORTS", "REFUTES"}``) keeps only the claims with one
    of them and skips the rest, labels factrl does not know included (Climate-FEVER's DISPUTED);
    without it an unknown label is an error naming the row.
    """
    file, rows = str(path), []
    for row, rec in iter_jsonl(path):
        if keep_labels is not None and known_label(rec.get("label")) not in keep_labels:
            continue
        rows.append((row, claim_record(rec, file, row, source)))
    return unique_ids(validate(table_of(rows, CLAIMS, file), CLAIMS, file), file, [r for r, _ in rows])


def read_passages_jsonl(path: str | Path, source: str | None = None) -> pa.Table:
    """Read a passage file of ``{id, title, text}`` records."""
    file, rows = str(path), []
    for row, rec in iter_jsonl(path):
        for name in ("id", "text"):
            if rec.get(name) is None:
                raise DataError(file, row, name, "required field is missing")
        if not isinstance(rec["text"], str):
            raise DataError(file, row, "text", f"expected a string, got {type(rec['text']).__name__}")
        rows.append((row, {"id": str(rec["id"]), "title": rec.get("title"), "text": rec["text"],
                           "source": source or Path(file).stem}))
    return unique_ids(validate(table_of(rows, PASSAGES, file), PASSAGES, file), file, [r for r, _ in rows])


def table_of(rows: list[tuple[int, dict]], schema: pa.Schema, file: str) -> pa.Table:
    """``(line, record)`` pairs as a table of ``schema``; a value arrow cannot convert (an object
    where a string belongs, a float as ``num_hops``) is a DataError naming its line and field."""
    try:
        return pa.Table.from_pylist([r for _, r in rows], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        pass
    for row, rec in rows:  # find the first bad value, field by field
        for f in schema:
            try:
                pa.array([rec.get(f.name)], type=f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as exc:
                raise DataError(file, row, f.name, f"expected {f.type}, got {rec.get(f.name)!r:.80} ({exc})") from None
    raise DataError(file, None, None, "records arrow cannot convert")  # not reached: some value failed


def unique_ids(table: pa.Table, file: str, rows: list[int] | None = None) -> pa.Table:
    """``table`` unchanged when its ids are unique, else a DataError naming the second occurrence
    (``rows``: the file's line of each table row, for JSONL files that skip blank lines)."""
    ids = table.column("id")
    if pc.count_distinct(ids).as_py() == len(ids):
        return table
    first: dict[str, int] = {}
    for i, value in enumerate(ids.to_pylist()):
        if value in first:
            where = rows or range(len(ids))
            raise DataError(file, where[i], "id", f"duplicate id {value!r} (first at row {where[first[value]]})")
        first[value] = i
    return table


# --------------------------------------------------------------------------------------------
# Parquet and dispatch
# --------------------------------------------------------------------------------------------


def read_table(path: str | Path, schema: pa.Schema) -> pa.Table:
    """Read a Parquet file written by a stage and validate it against ``schema``."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataError(str(path), None, None, f"unreadable Parquet: {exc}") from None
    table = validate(table, schema, str(path))
    # claims and passages are looked up by id: a repeated one would silently shadow the other
    return unique_ids(table, str(path)) if schema in (CLAIMS, PASSAGES) else table


def read_claims(path: str | Path) -> pa.Table:
    """Claims from ``.jsonl`` (shared-data format) or ``.parquet`` (CLAIMS schema)."""
    return read_claims_jsonl(path) if str(path).endswith(".jsonl") else read_table(path, CLAIMS)


def read_passages(path: str | Path) -> pa.Table:
    """Passages from ``.jsonl`` or ``.parquet``."""
    return read_passages_jsonl(path) if str(path).endswith(".jsonl") else read_table(path, PASSAGES)


# --------------------------------------------------------------------------------------------
# Hugging Face hub (real scale; the row mappings are unit-tested on local rows)
# --------------------------------------------------------------------------------------------


def hover_row(row: dict, index: int) -> dict:
    """One row of the hub's ``hover`` dataset -> CLAIMS record."""
    facts = row.get("supporting_facts") or []
    titles = [f["key"] if isinstance(f, dict) else f[0] for f in facts]
    label = row["label"]
    label = HUB_LABELS["hover"][label] if isinstance(label, int) else normalize_label(label, "hub:hover", index)
    return {
        "id": f"hover-{row.get('uid') or row.get('id') or index}",
        "claim": row["claim"],
        "label": label,
        "num_hops": row.get("num_hops"),
        "evidence": titles,
        "evidence_ids": None,
        "explanation": None,
        "source": "hover",
        "hops": None,
        "split": None,
    }


def fever_row(row: dict, index: int) -> dict:
    """One row of the hub's ``fever`` (v1.0) dataset -> CLAIMS record."""
    label = row["label"]
    label = HUB_LABELS["fever"][label] if isinstance(label, int) else normalize_label(label, "hub:fever", index)
    title = row.get("evidence_wiki_url")
    return {
        "id": f"fever-{row.get('id', index)}",
        "claim": row["claim"],
        "label": label,
        "num_hops": 1,
        "evidence": [title] if title else [],
        "evidence_ids": None,
        "explanation": None,
        "source": "fever",
        "hops": None,
        "split": None,
    }


def exfever_row(row: dict, index: int) -> dict:
    """One row of EX-FEVER's CSV (hub mirror or local) -> CLAIMS record."""
    entities = row.get("golden entity") or row.get("golden_entity") or ""
    titles = [t.strip() for t in (entities if isinstance(entities, list) else str(entities).split("|")) if t.strip()]
    return {
        "id": f"exfever-{row.get('id', index)}",
        "claim": row.get("claim") or row.get("Claim"),
        "label": normalize_label(row.get("label") or row.get("Label"), "hub:exfever", index),
        "num_hops": len(titles) or None,
        "evidence": titles,
        "evidence_ids": None,
        "explanation": row.get("explanation") or row.get("Explanation"),
        "source": "exfever",
        "hops": None,
        "split": None,
    }


# hub name -> (dataset id, config name, row mapper)
HUB_DATASETS: dict[str, tuple[str, str | None, Callable[[dict, int], dict]]] = {
    "hover": ("hover-nlp/hover", None, hover_row),
    "fever": ("fever/fever", "v1.0", fever_row),
    "exfever": ("dependentsign/EX-FEVER", None, exfever_row),
}


def map_hub_rows(name: str, rows: Iterable[dict], limit: int = 0) -> pa.Table:
    """Map hub rows with the dataset's mapper and validate (``limit`` 0 = all)."""
    mapper = HUB_DATASETS[name][2]
    records = []
    for i, row in enumerate(rows):
        if limit and i >= limit:
            break
        records.append(mapper(row, i))
    return validate(pa.Table.from_pylist(records, schema=CLAIMS), CLAIMS, f"hub:{name}")


def load_hub_claims(name: str, split: str, limit: int = 0) -> pa.Table:
    """Download (or read from the HF cache) a hub claim set and map it to CLAIMS."""
    if name not in HUB_DATASETS:
        raise ValueError(f"unknown hub dataset {name!r}; known: {sorted(HUB_DATASETS)}")
    import datasets

    dataset_id, config, _ = HUB_DATASETS[name]
    ds = datasets.load_dataset(dataset_id, config, split=split, streaming=bool(limit))
    return map_hub_rows(name, ds, limit)
