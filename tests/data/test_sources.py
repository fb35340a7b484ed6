"""Readers, label normalisation and the clear-error contract for bad input."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from factrl.data import sources
from factrl.data.schemas import CLAIMS, DataError, validate


def write_lines(path, lines):
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines) + b"\n")
    return path


GOOD = {"id": "c1", "claim": "A is B.", "label": "SUPPORTED", "num_hops": 2, "evidence": [{"title": "A", "text": None}]}


@pytest.mark.parametrize(
    "bad_line, row, field, words",
    [
        ('{"id": "c2", "claim": "x", ', 1, None, "malformed JSON"),
        (json.dumps({"id": "c2", "label": "SUPPORTS"}), 1, "claim", "missing"),
        (json.dumps({"id": "c2", "claim": 5, "label": "SUPPORTS"}), 1, "claim", "expected a string"),
        (json.dumps({"id": "c2", "claim": "x", "label": "MAYBE"}), 1, "label", "unknown label"),
        (json.dumps({"id": "c2", "claim": "   ", "label": "SUPPORTS"}), 1, "claim", "empty"),
        (json.dumps({"id": "c2", "claim": "x", "label": "SUPPORTS", "num_hops": "two"}), 1, "num_hops", "integer"),
        (b'{"id": "c2", "claim": "\xff\xfe", "label": "SUPPORTS"}', 1, None, "invalid UTF-8"),
    ],
)
def test_bad_claim_lines_name_file_row_and_field(tmp_path, bad_line, row, field, words):
    path = write_lines(tmp_path / "claims.jsonl", [json.dumps(GOOD), bad_line])
    with pytest.raises(DataError) as info:
        sources.read_claims_jsonl(path)
    err = info.value
    assert (err.file, err.row, err.field) == (str(path), row, field)
    assert words in str(err) and str(path) in str(err) and f"row {row}" in str(err)


def test_passage_missing_text_is_reported(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [json.dumps({"id": "p1", "title": "t", "text": "ok"}), json.dumps({"id": "p2"})])
    with pytest.raises(DataError, match=r"row 1, field 'text'"):
        sources.read_passages_jsonl(path)


@pytest.mark.parametrize(
    "raw, expected",
    [("SUPPORTED", "SUPPORTS"), ("NOT_SUPPORTED", "REFUTES"), ("SUPPORT", "SUPPORTS"), ("REFUTE", "REFUTES"),
     ("NOT ENOUGH INFO", "NOT ENOUGH INFO"), ("not_enough_info", "NOT ENOUGH INFO"), ("REFUTES", "REFUTES")],
)
def test_label_normalisation(raw, expected):
    assert sources.normalize_label(raw, "f", 0) == expected


def test_parquet_with_wrong_type_names_row_and_field(tmp_path):
    table = pa.table({"id": ["a", "b"], "claim": ["x", "y"], "label": ["SUPPORTS", "REFUTES"],
                      "num_hops": ["2", "three"], "source": ["s", "s"]})
    import pyarrow.parquet as pq

    pq.write_table(table, tmp_path / "c.parquet")
    with pytest.raises(DataError) as info:
        sources.read_claims(tmp_path / "c.parquet")
    assert info.value.field == "num_hops" and info.value.row == 1


@pytest.mark.parametrize(
    "name, count",
    [("hover_dev_sample.jsonl", 2000), ("exfever_test_sample.jsonl", 2000), ("fever_symmetric_dev.jsonl", 708),
     ("climatefever_sample.jsonl", None), ("haris_eval/hover_3hop.jsonl", None), ("haris_eval/checkwhy.jsonl", None)],
)
def test_reads_shared_files(shared_data, name, count):
    path = shared_data / name
    if name.startswith("climatefever"):
        # Climate-FEVER keeps its DISPUTED label, which factrl does not train on: a clear error.
        with pytest.raises(DataError, match="DISPUTED"):
            sources.read_claims_jsonl(path)
        return
    table = sources.read_claims_jsonl(path)
    assert table.schema == CLAIMS
    if count:
        assert table.num_rows == count
    assert set(table.column("label").to_pylist()) <= {"SUPPORTS", "REFUTES", "NOT ENOUGH INFO"}


def test_keep_labels_skips_other_labels_and_still_checks_kept_rows(tmp_path):
    lines = [json.dumps(GOOD), json.dumps({"id": "c2", "claim": "x", "label": "DISPUTED"}),
             json.dumps({"id": "c3", "claim": "y", "label": "NOT ENOUGH INFO"}),
             json.dumps({"id": "c4", "claim": "z", "label": "refutes"})]
    path = write_lines(tmp_path / "c.jsonl", lines)
    table = sources.read_claims_jsonl(path, keep_labels={"SUPPORTS", "REFUTES"})
    assert table.column("id").to_pylist() == ["c1", "c4"]
    assert table.column("label").to_pylist() == ["SUPPORTS", "REFUTES"]
    # a kept row is checked as before: the error names its row and field
    write_lines(path, [*lines, json.dumps({"id": "c5", "claim": "", "label": "SUPPORTS"})])
    with pytest.raises(DataError) as info:
        sources.read_claims_jsonl(path, keep_labels={"SUPPORTS"})
    assert (info.value.row, info.value.field) == (4, "claim")


def test_climate_fever_binary_claims(shared_data):
    table = sources.read_claims_jsonl(shared_data / "climatefever_sample.jsonl",
                                      keep_labels={"SUPPORTS", "REFUTES"})
    labels = table.column("label").to_pylist()
    # ../shared/data/README.md: the sample holds 426 SUPPORTS and 165 REFUTES claims
    assert (labels.count("SUPPORTS"), labels.count("REFUTES"), len(labels)) == (426, 165, 591)


def test_hover_labels_map_to_binary(shared_data):
    table = sources.read_claims_jsonl(shared_data / "hover_dev_sample.jsonl")
    labels = table.column("label").to_pylist()
    assert labels.count("SUPPORTS") == 260 + 484 + 255 and labels.count("REFUTES") == 303 + 434 + 264


def test_hub_row_mappings_on_local_rows():
    hover = sources.map_hub_rows(
        "hover",
        [{"id": 0, "uid": "u1", "claim": "X was born in Y.", "supporting_facts": [{"key": "X", "value": 0}],
          "label": 1, "num_hops": 2, "hpqa_id": "h"}],
    )
    row = hover.to_pylist()[0]
    assert (row["id"], row["label"], row["num_hops"], row["evidence"]) == ("hover-u1", "REFUTES", 2, ["X"])
    fever = sources.map_hub_rows(
        "fever", [{"id": 7, "label": "NOT ENOUGH INFO", "claim": "Z.", "evidence_wiki_url": ""},
                  {"id": 8, "label": "SUPPORTS", "claim": "W.", "evidence_wiki_url": "W_page"}])
    assert fever.column("label").to_pylist() == ["NOT ENOUGH INFO", "SUPPORTS"]
    assert fever.column("evidence").to_pylist() == [[], ["W_page"]]
    ex = sources.map_hub_rows(
        "exfever", [{"id": 3, "claim": "Q.", "label": "REFUTE", "golden entity": "A|B|C", "explanation": "e"}])
    assert ex.to_pylist()[0]["num_hops"] == 3 and ex.to_pylist()[0]["label"] == "REFUTES"


def test_hub_mapping_rejects_unknown_label():
    with pytest.raises(DataError, match="label"):
        sources.map_hub_rows("exfever", [{"id": 1, "claim": "Q.", "label": "PERHAPS", "golden entity": "A"}])


def test_validate_rejects_null_required():
    table = pa.table({"id": ["a"], "claim": [None], "label": ["SUPPORTS"], "source": ["s"]})
    with pytest.raises(DataError, match="claim"):
        validate(table, CLAIMS, "t")
