"""Multi-hop QA items (factrl.data.multihop) and M2R's reference trajectories of the demo world."""

from __future__ import annotations

import json

import pytest

from factrl.data.multihop import read_qa_jsonl, world_items, world_question
from factrl.data.reference import check_reference, world_m2r_references
from factrl.data.schemas import DataError

CLAIM = {"id": "w-c1", "claim": "The founder of the company Orlen Studios was born in Varna.", "label": "REFUTES",
         "num_hops": 2,
         "hops": [{"question": "Who founded Orlen Studios?", "answer": "Ilse Parrow", "passage_ids": ["w-p1"]},
                  {"question": "In which city was Ilse Parrow born?", "answer": "Tessik", "passage_ids": ["w-p2"]}]}


def test_a_gold_chain_becomes_one_question_about_its_true_end():
    question, chain = world_question(CLAIM)
    assert question == "In which city was the founder of Orlen Studios born?"
    assert chain[-1] == ("In which city was Ilse Parrow born?", "Tessik")
    [item] = world_items([CLAIM, dict(CLAIM, id="w-c2", label="SUPPORTS")])  # the twin claim: one question
    assert item["answers"] == ["Tessik"] and item["num_hops"] == 2


def test_claims_without_a_template_chain_give_no_question():
    broken = dict(CLAIM, hops=[CLAIM["hops"][0], dict(CLAIM["hops"][1], question="In which city was Bob born?")])
    assert world_question(broken) is None and world_question(dict(CLAIM, hops=None)) is None
    assert world_items([broken]) == []


def test_qa_files_load_with_aliases_and_bad_rows_name_file_row_and_field(tmp_path):
    good = {"id": "q1", "question": "Who?", "answer": "G. Stanley Hall", "answer_aliases": ["Stanley Hall"]}
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({"id": "q2", "question": "What?"}) + "\n")
    with pytest.raises(DataError, match=r"qa.jsonl.*row 1.*answer"):
        read_qa_jsonl(path)
    assert read_qa_jsonl(path, limit=1)[0]["answers"] == ["G. Stanley Hall", "Stanley Hall"]


def test_the_shared_musique_and_hotpotqa_samples_load(shared_data):
    for name in ("musique", "hotpotqa"):
        items = read_qa_jsonl(shared_data / f"{name}_sample.jsonl")
        assert len(items) == 100 and all(it["question"] and it["answers"][0] for it in items)


class WorldRetriever:
    """Answers every query with the passage of the query's subject, as the demo world's index would."""

    name = "retriever"

    def __call__(self, queries):
        facts = {"Orlen Studios": "Doc 1 (Orlen Studios) Orlen Studios was founded by Ilse Parrow.",
                 "Ilse Parrow": "Doc 1 (Ilse Parrow) Ilse Parrow was born in Tessik in 1950."}
        return [next((v for k, v in facts.items() if q.startswith(k)), "No passage matched the query.")
                for q in queries]


def test_reference_m2r_trajectories_are_valid_in_the_agents_own_format():
    kept, rejected = world_m2r_references(world_items([CLAIM]), WorldRetriever())
    assert rejected == [] and len(kept) == 1
    row = kept[0]
    assert row["agent"] == "m2r" and row["report"] == "Tessik"
    assert check_reference(row) is None
    texts = [t["text"] for t in row["turns"] if t["role"] == "model"]
    assert '<key_info_save>{"founder of Orlen Studios": "Ilse Parrow"}</key_info_save>' in texts[1]
    assert texts[-2].endswith("<micro_tool_call>birthplace of Ilse Parrow</micro_tool_call>")
    assert json.loads(row["turns"][-2]["text"]) == {"birthplace of Ilse Parrow": "Tessik"}  # the store's answer
    assert texts[-1] == "The answer is \\boxed{Tessik}.</answer>"


def test_a_reference_whose_retrieval_misses_the_fact_is_rejected():
    class Blind:
        def __call__(self, queries):
            return ["No passage matched the query." for _ in queries]

    kept, rejected = world_m2r_references(world_items([CLAIM]), Blind())
    assert kept == [] and [r["reason"] for r in rejected] == ["retrieval_miss"]
