"""Stage `prepare`: stratified splits on real claim files, and no output on bad input."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest
import yaml

from stages import prepare


def run_prepare(tmp_path, monkeypatch, section):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"prepare": section}))
    monkeypatch.chdir(tmp_path)
    prepare.main("params.yaml", tmp_path / "data")
    return tmp_path / "data"


def test_files_source_splits_stratified(tmp_path, monkeypatch, shared_data):
    claims = str(shared_data / "haris_eval" / "hover_3hop.jsonl")
    passages = str(shared_data / "haris_eval" / "passages.jsonl")
    out = run_prepare(tmp_path, monkeypatch, {"source": "files", "files": {"claims": [claims], "passages": [passages]},
                                                "split_fractions": [0.6, 0.2, 0.2], "seed": 3})
    splits = {n: pq.read_table(out / "claims" / f"{n}.parquet") for n in ("train", "dev", "eval")}
    total = sum(t.num_rows for t in splits.values())
    all_ids = [i for t in splits.values() for i in t.column("id").to_pylist()]
    assert len(set(all_ids)) == total  # every claim in exactly one split
    for name, share in (("train", 0.6), ("dev", 0.2), ("eval", 0.2)):
        t = splits[name]
        assert abs(t.num_rows - share * total) <= 2
        assert set(t.column("split").to_pylist()) == {name}
    # label balance is kept within one claim per stratum
    full = Counter(lab for t in splits.values() for lab in t.column("label").to_pylist())
    train = Counter(splits["train"].column("label").to_pylist())
    for label, n in full.items():
        assert abs(train[label] - 0.6 * n) <= 1
    assert pq.read_table(out / "passages.parquet").num_rows > 0
    summary = json.loads((out / "prepare_summary.json").read_text())
    assert summary["train"]["claims"] == splits["train"].num_rows


def test_bad_input_writes_nothing(tmp_path, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "claim": "x", "label": "SUPPORTS"}) + "\n"
                   + json.dumps({"id": "b", "claim": "y", "label": "BOGUS"}) + "\n")
    with pytest.raises(Exception, match=r"bad.jsonl, row 1, field 'label'"):
        run_prepare(tmp_path, monkeypatch, {"source": "files", "files": {"claims": [str(bad)]}})
    assert not (tmp_path / "data" / "claims").exists()
    assert not (tmp_path / "data" / "passages.parquet").exists()


def test_same_seed_same_split(tmp_path, monkeypatch, shared_data):
    claims = str(shared_data / "haris_eval" / "exfever_2hop.jsonl")
    section = {"source": "files", "files": {"claims": [claims]}, "seed": 11}
    a = run_prepare(tmp_path / "a", monkeypatch, section) if (tmp_path / "a").mkdir() is None else None
    b = run_prepare(tmp_path / "b", monkeypatch, section) if (tmp_path / "b").mkdir() is None else None
    for name in ("train", "dev", "eval"):
        assert (a / "claims" / f"{name}.parquet").read_bytes() == (b / "claims" / f"{name}.parquet").read_bytes()


def test_a_hard_world_adds_the_warm_and_heldout_sets(tmp_path, monkeypatch):
    difficulty = {"homonyms": 0.3, "wordings": 3, "heldout_wordings": 1, "near_miss": 0.5, "cross_mentions": 0.3,
                  "heldout_combination": "produced_by>founded_by"}
    out = run_prepare(tmp_path, monkeypatch, {"source": "world", "world": {
        "seed": 5, "num_passages": 600, "num_claims": 120, "hops": [2, 3], "difficulty": difficulty}})
    sets = {p.stem: pq.read_table(p) for p in (out / "claims").glob("*.parquet")}
    assert set(sets) == {"train", "dev", "eval", "warm", "heldout_wording", "heldout_combination"}
    held = set(sets["heldout_combination"].column("id").to_pylist())
    assert held and sum(sets[n].num_rows for n in ("train", "dev", "eval")) + len(held) == 120
    assert not held & {i for n in ("train", "dev", "eval") for i in sets[n].column("id").to_pylist()}
    warm_ids = set(sets["warm"].column("id").to_pylist())
    assert warm_ids < set(sets["train"].column("id").to_pylist())  # a clean part of train, not all of it
    assert sets["heldout_wording"].column("id").to_pylist() == sets["eval"].column("id").to_pylist()
    summary = json.loads((out / "prepare_summary.json").read_text())
    assert summary["warm"]["claims"] == len(warm_ids) and summary["heldout_wording"]["claims"] == sets["eval"].num_rows
    assert not (out / ".prepare-work").exists()


def test_a_clean_world_warm_starts_on_all_of_train(tmp_path, monkeypatch):
    out = run_prepare(tmp_path, monkeypatch, {"source": "world", "world": {
        "seed": 5, "num_passages": 300, "num_claims": 30, "hops": [2]}})
    assert (out / "claims" / "warm.parquet").read_bytes() == (out / "claims" / "train.parquet").read_bytes()
    assert not (out / "claims" / "heldout_wording.parquet").exists()
