"""Sentences with offsets, and the best-matching sentence of the retrieved passages."""

from __future__ import annotations

from factrl.retrieval.index import Hit
from factrl.service.citations import cite, sentence_spans


def test_sentence_spans_cover_the_text_exactly():
    text = "Mupom is a 2018 film.  It runs for 177 minutes! \"Why?\" Nobody knows"
    spans = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == ["Mupom is a 2018 film.", "It runs for 177 minutes!", "\"Why?\"",
                                             "Nobody knows"]


def test_cite_picks_the_best_sentence_of_the_hits_and_none_without_overlap():
    hits = [Hit("a", "Orsa", "Orsa is a company. It was founded by Ilse Parrow.", 2.0),
            Hit("b", "Ilse", "Ilse Parrow was born in Tessik. She founded Orsa in 1990.", 1.0)]
    c = cite("Where was Ilse Parrow born?", "Ilse Parrow was born in Tessik.", hits)
    assert (c.passage_id, c.quote) == ("b", "Ilse Parrow was born in Tessik.")
    assert hits[1].text[c.start:c.end] == c.quote and c.overlap == 4
    assert cite("q", "completely unrelated words", hits) is None
    assert cite("q", "anything", []) is None
