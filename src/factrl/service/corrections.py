"""Reviewers' corrections: an SQLite store with provenance, exported as a claim file ``prepare`` merges.

A reviewer accepts a verdict (corrected = original) or corrects it, and may name the cited passage
that settles it. Each row keeps where the verdict came from: the checkpoint's name and the content
hashes of its models, the index's hash, the hash of the ``serve`` params, the UTC time and the
reviewer's name. :func:`export_claims` writes them in the CLAIMS contract
(``factrl.data.schemas.CLAIMS``): Parquet, or JSONL in the shared-data format, both read back by
``factrl.data.sources.read_claims``; the label is the reviewer's verdict, the settling passage the
evidence, the provenance a JSON object in ``explanation``, the source ``corrections``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import threading
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

from factrl.data.schemas import LABELS

SOURCE = "corrections"  # the ``source`` of every exported claim

_COLUMNS = """
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_utc TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    claim TEXT NOT NULL,
    original_verdict TEXT,
    corrected_verdict TEXT NOT NULL,
    passage_id TEXT,
    quote TEXT,
    checkpoint TEXT NOT NULL,
    checkpoint_hash TEXT NOT NULL,
    index_hash TEXT NOT NULL,
    params_hash TEXT NOT NULL,
    job_id TEXT,
    note TEXT
"""


@dataclass(frozen=True)
class Correction:
    """One reviewer decision; ``id`` and ``created_utc`` are set by the store."""

    reviewer: str
    claim: str
    original_verdict: str | None
    corrected_verdict: str
    checkpoint: str
    checkpoint_hash: str
    index_hash: str
    params_hash: str
    passage_id: str | None = None
    quote: str | None = None
    job_id: str | None = None
    note: str | None = None
    id: int | None = None
    created_utc: str | None = None

    def __post_init__(self) -> None:
        if not self.reviewer.strip():
            raise ValueError("reviewer: a reviewer name is required")
        if not self.claim.strip():
            raise ValueError("claim: empty claim")
        if self.corrected_verdict not in LABELS:
            raise ValueError(f"corrected_verdict: {self.corrected_verdict!r} is not one of {list(LABELS)}")
        if self.original_verdict is not None and self.original_verdict not in LABELS:
            raise ValueError(f"original_verdict: {self.original_verdict!r} is not one of {list(LABELS)} or null")

    @property
    def accepted(self) -> bool:
        """The reviewer kept the verdict."""
        return self.corrected_verdict == self.original_verdict


class CorrectionStore:
    """Corrections in one SQLite file (created on first use); safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        with self._lock, self._db:
            self._db.execute(f"CREATE TABLE IF NOT EXISTS corrections ({_COLUMNS})")

    def add(self, correction: Correction) -> Correction:
        """Store ``correction``; returns it with its id and UTC time."""
        row = asdict(correction) | {"created_utc": datetime.now(UTC).isoformat(timespec="seconds")}
        row.pop("id")
        with self._lock, self._db:
            cur = self._db.execute(f"INSERT INTO corrections ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                                   list(row.values()))
        return Correction(**row, id=cur.lastrowid)

    def all(self) -> list[Correction]:
        """Every correction, oldest first."""
        names = [f.name for f in fields(Correction)]
        with self._lock:
            rows = self._db.execute(f"SELECT {', '.join(names)} FROM corrections ORDER BY id").fetchall()
        return [Correction(**dict(r)) for r in rows]

    def close(self) -> None:
        self._db.close()


def claim_rows(corrections: list[Correction]) -> list[dict]:
    """CLAIMS rows of the corrections, the latest decision per claim text (a claim corrected twice
    trains on the last word), in the order of those decisions."""
    latest: dict[str, Correction] = {}
    for c in corrections:
        latest.pop(c.claim.strip(), None)
        latest[c.claim.strip()] = c
    rows = []
    for c in latest.values():
        provenance = {k: getattr(c, k) for k in ("reviewer", "created_utc", "checkpoint", "checkpoint_hash",
                                                 "index_hash", "params_hash", "original_verdict", "job_id", "note")}
        rows.append({"id": f"correction-{c.id}", "claim": c.claim, "label": c.corrected_verdict, "num_hops": None,
                     "evidence": [c.quote] if c.quote else None,
                     "evidence_ids": [c.passage_id] if c.passage_id else None,
                     "explanation": json.dumps(provenance, sort_keys=True), "source": SOURCE,
                     "hops": None, "split": None})
    return rows


def export_claims(corrections: list[Correction], path: str | Path) -> Path:
    """Write the corrections as a claim file: ``.parquet`` (CLAIMS schema) or ``.jsonl`` (the
    shared-data format: evidence as ``{passage_id, text}`` objects); returns the path."""
    import pyarrow as pa

    from factrl.data.schemas import CLAIMS
    from factrl.io import write_parquet, write_text

    path = Path(path)
    rows = claim_rows(corrections)
    if path.suffix == ".parquet":
        write_parquet(pa.Table.from_pylist(rows, schema=CLAIMS), path, CLAIMS)
    elif path.suffix == ".jsonl":
        lines = []
        for r in rows:
            evidence = ([{"passage_id": pid, "text": q} for pid, q in zip(r["evidence_ids"], r["evidence"] or [None])]
                        if r["evidence_ids"] else None)
            record = {k: v for k, v in r.items() if k not in ("evidence", "evidence_ids") and v is not None}
            lines.append(json.dumps(record | ({"evidence": evidence} if evidence else {})))
        write_text("".join(line + "\n" for line in lines), path)
    else:
        raise ValueError(f"{path}: export as .parquet or .jsonl")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m factrl.service.corrections DB OUT``: export a corrections database as a claim file."""
    parser = argparse.ArgumentParser(prog="python -m factrl.service.corrections",
                                     description="export reviewers' corrections as a claim file prepare can merge")
    parser.add_argument("db", help="the corrections SQLite file (serve.corrections_db)")
    parser.add_argument("out", help="claim file to write: .parquet (CLAIMS schema) or .jsonl")
    args = parser.parse_args(argv)
    if not Path(args.db).is_file():
        parser.error(f"{args.db}: no such corrections database")
    store = CorrectionStore(args.db)
    corrections = store.all()
    store.close()
    print(f"{export_claims(corrections, args.out)}: {len(claim_rows(corrections))} claims")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
