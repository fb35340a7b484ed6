"""Reviewer corrections merged into the training claims (factrl.data.corrections, stage prepare)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from factrl.data.corrections import merge_corrections
from factrl.data.schemas import CLAIMS, DataError


def _claims(split: str, *ids: str, label: str = "SUPPORTS") -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "claim": f"claim {i}", "label": label, "num_hops": 2, "source": "world",
                                  "split": split} for i in ids], schema=CLAIMS)


def _write(path, *records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _fix(ident: str, label: str, note: str = "reviewer ana") -> dict:
    return {"id": ident, "claim": f"corrected {ident}", "label": label, "num_hops": 2, "source": "corrections",
            "explanation": note}


def test_merge_replaces_adds_and_moves_held_out_claims_to_train(tmp_path):
    splits = {"train": _claims("train", "t1", "t2"), "dev": _claims("dev", "d1"), "eval": _claims("eval", "e1", "e2")}
    f1 = _write(tmp_path / "a.jsonl", _fix("t1", "REFUTES"), _fix("new", "REFUTES"), _fix("e2", "REFUTES"))
    f2 = _write(tmp_path / "b.jsonl", _fix("t1", "SUPPORTS", "reviewer bo"))  # a later file wins
    out, counts = merge_corrections(splits, [f1, f2])
    train = {r["id"]: r for r in out["train"].to_pylist()}
    assert set(train) == {"t1", "t2", "new", "e2"}
    assert train["t1"]["label"] == "SUPPORTS" and train["t1"]["explanation"] == "reviewer bo"
    assert train["new"]["label"] == "REFUTES" and train["new"]["split"] == "train"
    assert train["e2"]["claim"] == "corrected e2"
    # a corrected held-out claim is trained on, so it leaves eval; nothing is ever added to dev / eval
    assert out["eval"].column("id").to_pylist() == ["e1"] and out["dev"].num_rows == 1
    assert counts == {"corrections": 3, "replaced": 1, "added": 1, "moved_from_eval": 1}
    assert out["train"].schema == CLAIMS


def test_no_corrections_changes_nothing():
    splits = {"train": _claims("train", "t1"), "eval": _claims("eval", "e1")}
    out, counts = merge_corrections(splits, [])
    assert out == splits and counts == {"corrections": 0, "replaced": 0, "added": 0}


def test_duplicate_id_in_a_file_names_file_row_and_field(tmp_path):
    bad = _write(tmp_path / "dup.jsonl", _fix("a", "REFUTES"), _fix("b", "REFUTES"), _fix("a", "SUPPORTS"))
    with pytest.raises(DataError, match=r"dup.jsonl, row 2, field 'id': duplicate id 'a' \(first at row 0\)"):
        merge_corrections({"train": _claims("train", "t1")}, [bad])


def test_bad_correction_rows_and_missing_files_fail_clearly(tmp_path):
    bad = _write(tmp_path / "bad.jsonl", _fix("a", "REFUTES"), _fix("b", "MAYBE"))
    with pytest.raises(DataError, match=r"bad.jsonl, row 1, field 'label'"):
        merge_corrections({"train": _claims("train", "t1")}, [bad])
    with pytest.raises(FileNotFoundError, match=r"prepare.corrections: .*nope.jsonl does not exist"):
        merge_corrections({"train": _claims("train", "t1")}, [tmp_path / "nope.jsonl"])


def test_prepare_stage_merges_corrections_into_train_only(tmp_path, monkeypatch):
    """The stage on a small demo world: corrections land in train.parquet with their provenance."""
    from stages import prepare

    world = {"seed": 3, "num_passages": 120, "num_claims": 40, "hops": [2]}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"prepare": {"source": "world", "world": world}}))
    monkeypatch.chdir(tmp_path)
    prepare.main("params.yaml", tmp_path / "plain")
    plain = {n: pq.read_table(tmp_path / "plain" / "claims" / f"{n}.parquet") for n in ("train", "dev", "eval")}
    train_id = plain["train"].column("id")[0].as_py()
    eval_id = plain["eval"].column("id")[0].as_py()
    old_label = plain["train"].column("label")[0].as_py()
    flipped = "REFUTES" if old_label == "SUPPORTS" else "SUPPORTS"
    fixes = _write(tmp_path / "fixes.jsonl", _fix(train_id, flipped, "reviewer ana; checkpoint abc"),
                   _fix("review-1", "SUPPORTS"), _fix(eval_id, "REFUTES"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"prepare": {"source": "world", "world": world,
                                                                      "corrections": [fixes]}}))
    prepare.main("params.yaml", tmp_path / "data")
    got = {n: pq.read_table(tmp_path / "data" / "claims" / f"{n}.parquet") for n in ("train", "dev", "eval", "warm")}
    train = {r["id"]: r for r in got["train"].to_pylist()}
    assert train[train_id]["label"] == flipped and train[train_id]["explanation"] == "reviewer ana; checkpoint abc"
    assert train[train_id]["source"] == "corrections" and "review-1" in train and eval_id in train
    assert got["train"].num_rows == plain["train"].num_rows + 2
    assert eval_id not in got["eval"].column("id").to_pylist()
    assert got["eval"].num_rows == plain["eval"].num_rows - 1 and got["dev"] == plain["dev"]
    assert set(got["warm"].column("id").to_pylist()) == set(train)  # a clean world's warm start reads train
    summary = json.loads((tmp_path / "data" / "prepare_summary.json").read_text())
    assert summary["corrections"] == {"corrections": 3, "replaced": 1, "added": 1, "moved_from_eval": 1}


def test_a_correction_of_a_known_claim_under_another_id_replaces_it(tmp_path):
    """The service exports ids of its own (``correction-<n>``): a correction whose text is a claim of a
    split corrects that claim (a held-out one leaves its split), it is not a second copy of it."""
    splits = {"train": _claims("train", "t1"), "eval": _claims("eval", "e1", "e2")}
    fixes = _write(tmp_path / "x.jsonl", {"id": "correction-7", "claim": "claim e2 ", "label": "REFUTES",
                                          "source": "corrections", "explanation": "{}"},
                   {"id": "correction-8", "claim": "claim t1", "label": "REFUTES", "source": "corrections"})
    out, counts = merge_corrections(splits, [fixes])
    assert counts == {"corrections": 2, "replaced": 1, "added": 0, "moved_from_eval": 1}
    train = {r["id"]: r for r in out["train"].to_pylist()}
    assert set(train) == {"t1", "e2"} and train["e2"]["label"] == train["t1"]["label"] == "REFUTES"
    assert out["eval"].column("id").to_pylist() == ["e1"]


def test_a_correction_saved_in_the_service_and_exported_lands_in_train_with_its_provenance(tmp_path, monkeypatch):
    """The whole way: a reviewer's decision stored by the service (SQLite), exported as a claim file
    under corrections/, listed in prepare.corrections, merged by the prepare stage into
    data/claims/train.parquet with its provenance (reviewer, time, checkpoint / index / params hashes)."""
    from factrl.service.corrections import Correction, CorrectionStore, export_claims
    from stages import prepare

    world = {"seed": 3, "num_passages": 120, "num_claims": 40, "hops": [2]}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"prepare": {"source": "world", "world": world}}))
    monkeypatch.chdir(tmp_path)
    prepare.main("params.yaml", tmp_path / "plain")
    held_out = pq.read_table(tmp_path / "plain" / "claims" / "eval.parquet").to_pylist()[0]
    flipped = "REFUTES" if held_out["label"] == "SUPPORTS" else "SUPPORTS"

    store = CorrectionStore(tmp_path / "corrections" / "corrections.sqlite")
    store.add(Correction(reviewer="Ada Reviewer", claim=held_out["claim"], original_verdict=held_out["label"],
                         corrected_verdict=flipped, checkpoint="HARIS (trained)", checkpoint_hash="aaaa+bbbb",
                         index_hash="cccc", params_hash="dddd", passage_id="w-p1", quote="A quoted sentence.",
                         note="the passage says otherwise"))
    store.add(Correction(reviewer="Bo", claim="Ilse Parrow founded Orsa.", original_verdict=None,
                         corrected_verdict="SUPPORTS", checkpoint="HARIS (trained)", checkpoint_hash="aaaa+bbbb",
                         index_hash="cccc", params_hash="dddd"))
    export_claims(store.all(), tmp_path / "corrections" / "reviewed.jsonl")
    store.close()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"prepare": {
        "source": "world", "world": world, "corrections": ["corrections/reviewed.jsonl"]}}))
    prepare.main("params.yaml", tmp_path / "data")

    train = {r["claim"]: r for r in pq.read_table(tmp_path / "data" / "claims" / "train.parquet").to_pylist()}
    fixed = train[held_out["claim"]]
    assert fixed["id"] == held_out["id"] and fixed["label"] == flipped and fixed["source"] == "corrections"
    assert fixed["evidence_ids"] == ["w-p1"] and fixed["evidence"] == ["A quoted sentence."]
    provenance = json.loads(fixed["explanation"])
    assert provenance["reviewer"] == "Ada Reviewer" and provenance["created_utc"]
    assert (provenance["checkpoint_hash"], provenance["index_hash"], provenance["params_hash"]) == ("aaaa+bbbb", "cccc", "dddd")
    assert provenance["original_verdict"] == held_out["label"] and provenance["note"] == "the passage says otherwise"
    assert json.loads(train["Ilse Parrow founded Orsa."]["explanation"])["reviewer"] == "Bo"
    # the reviewed held-out claim is trained on now, so it is no longer scored
    assert held_out["id"] not in pq.read_table(tmp_path / "data" / "claims" / "eval.parquet").column("id").to_pylist()
