"""Reviewer corrections merged into the training claims (params ``prepare.corrections``).

A correction file is a claim file in the project's claims format (JSONL in the shared-data format,
or Parquet with the CLAIMS schema; ``factrl.data.sources.read_claims`` reads and validates it): the
service's exporter writes one from its SQLite store, one claim per accepted or corrected verdict,
its provenance in ``source`` / ``explanation``. Stage ``prepare`` calls :func:`merge_corrections`
on its splits:

* a correction whose id is a claim of ``train`` replaces that claim (label, text, provenance);
* one whose id is a ``dev`` or ``eval`` claim (a reviewer corrected a held-out claim) moves to
  ``train`` and the claim leaves its split: a claim trained on is never scored, so the held-out
  sets can shrink but never leak;
* any other id is added to ``train``, unless its claim text (stripped) is a claim of a split: then
  it is a correction of that claim and takes that claim's id (the service exports ids of its own,
  ``correction-<n>``, because a reviewer checks a claim's text, not a dataset row; without this a
  reviewed held-out claim would be trained on while still scored).

Files apply in order (a later file's correction of the same id wins). A file that repeats an id
is an error naming the file, the row and the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from factrl.data.schemas import CLAIMS, DataError

TRAIN = "train"


def read_corrections(path: str | Path) -> pa.Table:
    """One correction file as CLAIMS rows, refusing an id that appears twice in it."""
    from factrl.data.sources import read_claims

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"params prepare.corrections: {path} does not exist")
    table = read_claims(path)
    seen: dict[str, int] = {}
    for row, ident in enumerate(table.column("id").to_pylist()):
        if ident in seen:
            raise DataError(str(path), row, "id", f"duplicate id {ident!r} (first at row {seen[ident]}); "
                                                  "a correction file holds one correction per claim")
        seen[ident] = row
    return table


def merge_corrections(splits: Mapping[str, pa.Table], files: Sequence[str | Path]
                      ) -> tuple[dict[str, pa.Table], dict[str, int]]:
    """``splits`` (name -> CLAIMS table, with ``train``) with the corrections of ``files`` merged
    into ``train`` (see the module docstring); and counts: ``corrections`` (distinct ids merged),
    ``replaced`` (train claims replaced), ``added`` (new ids), ``moved_from_<split>``."""
    if TRAIN not in splits:
        raise ValueError(f"no {TRAIN!r} split to merge corrections into (splits: {sorted(splits)})")
    by_text: dict[str, str] = {}  # a claim's text -> its id, to recognise a correction under an id of its own
    for table in splits.values():
        for ident, claim in zip(table.column("id").to_pylist(), table.column("claim").to_pylist()):
            by_text.setdefault(claim.strip(), ident)
    known_ids = {i for table in splits.values() for i in table.column("id").to_pylist()}
    latest: dict[str, dict] = {}
    for path in files:
        for rec in read_corrections(path).to_pylist():
            ident = rec["id"]
            if ident not in known_ids and rec["claim"].strip() in by_text:
                ident = by_text[rec["claim"].strip()]
            latest.pop(ident, None)  # re-inserted: a later correction of a claim comes later
            latest[ident] = rec | {"id": ident, "split": TRAIN}
    out = {name: table for name, table in splits.items()}
    counts = {"corrections": len(latest), "replaced": 0, "added": 0}
    if not latest:
        return out, counts
    where: dict[str, str] = {}
    for name, table in splits.items():
        for ident in table.column("id").to_pylist():
            where[ident] = name
    for name, table in splits.items():
        ids = table.column("id").to_pylist()
        hit = [i in latest for i in ids]
        if not any(hit):
            continue
        if name == TRAIN:
            counts["replaced"] = sum(hit)
        else:
            counts[f"moved_from_{name}"] = sum(hit)
        out[name] = table.filter(pa.array([not h for h in hit], pa.bool_()))
    counts["added"] = sum(1 for i in latest if i not in where)
    new = pa.Table.from_pylist(list(latest.values()), schema=CLAIMS)
    out[TRAIN] = pa.concat_tables([out[TRAIN].cast(CLAIMS), new])
    return out, counts
