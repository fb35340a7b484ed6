"""The corrections store and its export, read back by the project's claim reader."""

from __future__ import annotations

import json

import pytest

from factrl.data.sources import read_claims
from factrl.service.corrections import Correction, CorrectionStore, export_claims, main

PROV = {"checkpoint": "HARIS (trained)", "checkpoint_hash": "h1+h2", "index_hash": "i1", "params_hash": "p1"}


def test_store_round_trip_latest_decision_per_claim_and_cli_export(tmp_path, capsys):
    db = tmp_path / "c.sqlite"
    store = CorrectionStore(db)
    first = store.add(Correction("ana", "Orsa is in Tessik.", "SUPPORTS", "REFUTES", passage_id="p1",
                                 quote="Orsa is in Varna.", **PROV))
    store.add(Correction("bo", "Orsa is in Tessik.", "SUPPORTS", "SUPPORTS", **PROV))
    store.add(Correction("bo", "Ilse founded Orsa.", "REFUTES", "NOT ENOUGH INFO", **PROV))
    store.close()
    reopened = CorrectionStore(db).all()
    assert [c.reviewer for c in reopened] == ["ana", "bo", "bo"] and reopened[0] == first
    assert first.created_utc.endswith("+00:00") and not first.accepted and reopened[1].accepted
    assert main([str(db), str(tmp_path / "out.parquet")]) == 0 and "2 claims" in capsys.readouterr().out
    rows = read_claims(tmp_path / "out.parquet").to_pylist()
    assert [(r["claim"], r["label"]) for r in rows] == [("Orsa is in Tessik.", "SUPPORTS"),
                                                        ("Ilse founded Orsa.", "NOT ENOUGH INFO")]
    assert json.loads(rows[0]["explanation"])["reviewer"] == "bo" and rows[0]["evidence_ids"] is None
    export_claims(CorrectionStore(db).all()[:1], tmp_path / "one.jsonl")
    [row] = read_claims(tmp_path / "one.jsonl").to_pylist()
    assert row["evidence_ids"] == ["p1"] and row["evidence"] == ["Orsa is in Varna."] and row["label"] == "REFUTES"
    assert json.loads(row["explanation"]) | PROV == json.loads(row["explanation"])


@pytest.mark.parametrize("field, kwargs", [
    ("reviewer", {"reviewer": ""}), ("claim", {"claim": " "}), ("corrected_verdict", {"corrected_verdict": "TRUE"}),
    ("original_verdict", {"original_verdict": "x"})])
def test_bad_corrections_name_the_field(field, kwargs):
    base = {"reviewer": "ana", "claim": "c", "original_verdict": None, "corrected_verdict": "SUPPORTS"} | PROV
    with pytest.raises(ValueError, match=f"^{field}:"):
        Correction(**(base | kwargs))
    with pytest.raises(ValueError, match="parquet or .jsonl"):
        export_claims([], "x.csv")
