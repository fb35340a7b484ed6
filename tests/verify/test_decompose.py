"""The claim decomposer: sentences (pysbd + check-worthiness) and llm backends, offsets, the labelled texts."""

from __future__ import annotations

import json

import pytest

from factrl.llm.base import Completion
from factrl.verify.decompose import (
    BACKENDS,
    ClaimSpan,
    DecomposeError,
    check_worthy,
    decompose,
    parse_llm_claims,
    sentence_spans,
)
from factrl.verify.texts import labelled_texts, score_decomposition

TEXT = ("The founder of the company Orlen Studios was born in Varna.  I think that is lovely! "
        "Who founded Tessik Games?\nIlse Parrow directed the film Kavelo. Maybe Varna is nice. "
        "It rained.  Dr. Mira Sol was born in Debix in 1970.")


def test_sentences_keep_check_worthy_claims_with_exact_offsets():
    claims = decompose(TEXT)
    assert [c.text for c in claims] == ["The founder of the company Orlen Studios was born in Varna.",
                                        "Ilse Parrow directed the film Kavelo.",
                                        "Dr. Mira Sol was born in Debix in 1970."]
    for c in claims:
        assert TEXT[c.start:c.end] == c.text
    assert isinstance(claims[0], ClaimSpan) and claims[0].start == 0


@pytest.mark.parametrize("sentence, worthy", [
    ("Orlen Studios is based in Varna.", True),
    ("Who founded Orlen Studios?", False),                  # a question
    ("I think Orlen Studios is based in Varna.", False),    # an opinion
    ("Perhaps Varna deserves a visit one day.", False),     # a hedge
    ("The weather was fine that day.", False),              # no named entity
    ("Orlen Studios and Varna and Tessik.", False),         # no verb
    ("Varna exists.", False),                               # too short
    ("We love reading about Varna!", False),                # exclamation, first person
])
def test_check_worthiness_rules(sentence, worthy):
    assert check_worthy(sentence) is worthy


def test_repeated_sentences_get_their_own_offsets_and_empty_text_gives_nothing():
    text = "Ilse Parrow was born in Tessik. Ilse Parrow was born in Tessik."
    assert [(c.start, c.end) for c in decompose(text)] == [(0, 31), (32, 63)]
    assert decompose("   ") == [] and decompose("") == []
    with pytest.raises(ValueError, match="decomposer backend"):
        decompose(text, backend="nope")
    assert set(BACKENDS) == {"sentences", "llm"}


class FakeChat:
    """A chat LLM that answers every request with ``reply`` and records the messages it saw."""

    def __init__(self, reply: str):
        self.reply, self.seen = reply, []

    def chat(self, conversations, params):
        self.seen += list(conversations)
        return [[Completion(self.reply)] for _ in conversations]


def test_llm_backend_maps_claims_to_their_sentences_offsets():
    text = "Ilse Parrow founded Orlen Studios. She was born in Tessik, which lies in Debix. Wow!"
    reply = json.dumps({"claims": [
        {"claim": "Ilse Parrow founded Orlen Studios.", "sentence": 1},
        {"claim": "Ilse Parrow was born in Tessik.", "sentence": 2},
        {"claim": "Tessik lies in Debix.", "sentence": 2},
        {"claim": "Tessik lies in Debix.", "sentence": 9},  # out of range: the overlapping sentence
    ]})
    llm = FakeChat("Sure! Here they are:\n" + reply)
    claims = decompose(text, "llm", llm=llm)
    spans = sentence_spans(text)
    assert [c.text for c in claims][:3] == ["Ilse Parrow founded Orlen Studios.", "Ilse Parrow was born in Tessik.",
                                            "Tessik lies in Debix."]
    assert [(c.start, c.end) for c in claims] == [spans[0], spans[1], spans[1], spans[1]]
    assert text[claims[1].start:claims[1].end] == "She was born in Tessik, which lies in Debix."
    assert "[2] She was born in Tessik" in llm.seen[0][1]["content"]  # sentences numbered in the prompt


def test_llm_replies_are_parsed_leniently_or_refused_clearly():
    assert parse_llm_claims('["A is B.", {"claim": "C is D.", "sentence": 2}, {"claim": ""}, 3]') == [
        {"claim": "A is B.", "sentence": None}, {"claim": "C is D.", "sentence": 2}]
    with pytest.raises(DecomposeError, match="no JSON"):
        parse_llm_claims("I cannot do that.")
    with pytest.raises(DecomposeError, match="unparseable JSON"):
        decompose("Ilse Parrow founded Orlen Studios.", "llm", llm=FakeChat('{"claims": [{"claim": "x"'))
    with pytest.raises(ValueError, match="needs model="):
        decompose("Ilse Parrow founded Orlen Studios.", "llm")


def test_labelled_texts_are_deterministic_with_exact_gold_offsets():
    a, b = labelled_texts(5, seed=4), labelled_texts(5, seed=4)
    assert a == b and a != labelled_texts(5, seed=5)
    for t in a:
        assert 2 <= len(t.gold) <= 4
        for g in t.gold:
            assert t.text[g.start:g.end] == g.text
        assert len(sentence_spans(t.text)) == len(t.gold) + 2  # two fillers per text


def test_scoring_counts_recovered_extra_and_exact_offsets():
    gold = [ClaimSpan("Ilse Parrow was born in Tessik.", 0, 31), ClaimSpan("Orlen Studios lies in Varna.", 32, 60)]
    found = [ClaimSpan("Ilse Parrow was born in Tessik.", 0, 31), ClaimSpan("Parrow born Tessik", 0, 40),
             ClaimSpan("Something else entirely here.", 61, 80)]
    assert score_decomposition(gold, found) == {"gold": 2, "found": 3, "recovered": 1, "extra": 2,
                                                "exact_offsets": 1}


def test_sentences_backend_on_the_labelled_demo_texts():
    """Every gold claim found with its exact offsets; extra claims only from the fillers written to
    get past the rules (see factrl.verify.texts.FILLERS)."""
    texts = labelled_texts(10, seed=0)
    totals = {}
    for t in texts:
        for key, value in score_decomposition(t.gold, decompose(t.text)).items():
            totals[key] = totals.get(key, 0) + value
    assert totals["recovered"] == totals["gold"] == totals["exact_offsets"]
    assert totals["extra"] <= 2 * len(texts)


@pytest.mark.slow
def test_llm_backend_against_a_real_factrl_serve_llm():
    """SmolLM2 behind `factrl serve-llm`: the request goes over HTTP and whatever claims come back
    sit on sentence offsets of the text (a 135M model may well write no usable JSON: then the error
    says so, quoting the reply)."""
    from factrl.llm.serve import spawn_server

    text = "Ilse Parrow founded Orlen Studios. Orlen Studios is based in Varna. I love it!"
    with spawn_server("smollm2-135m", precision="fp32", device="cpu") as url:
        try:
            claims = decompose(text, "llm", model=f"openai:smollm2-135m@{url}", max_tokens=96)
        except DecomposeError as err:
            assert "reply" in str(err)
            return
    spans = set(sentence_spans(text))
    assert all((c.start, c.end) in spans and c.text for c in claims)
