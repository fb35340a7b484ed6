"""One verdict vocabulary: the tag parser, the typed verifier and the claims schema read the same words."""

from __future__ import annotations

import pytest

from factrl import signatures, verdicts
from factrl.agents import protocol
from factrl.data import schemas


def test_labels_have_one_home():
    assert schemas.LABELS is verdicts.LABELS
    assert (protocol.SUPPORTS, protocol.REFUTES) == (verdicts.SUPPORTS, verdicts.REFUTES)


@pytest.mark.parametrize("word", sorted(verdicts.VERDICT_WORDS))
def test_both_parsers_read_every_verdict_word(word):
    label = verdicts.VERDICT_WORDS[word]
    assert protocol.boxed_verdict(f"so \\boxed{{{word.capitalize()}}}") == label
    assert signatures.parse_verdict(f"Verdict: {word.capitalize()}") == label


def test_a_word_added_to_the_vocabulary_reaches_both_parsers(monkeypatch):
    # the parsers read the shared map, not copies of it: a new word is understood by both at once
    monkeypatch.setitem(verdicts.VERDICT_WORDS, "upheld", verdicts.SUPPORTS)
    assert protocol.boxed_verdict("\\boxed{Upheld}") == verdicts.SUPPORTS
    assert signatures.parse_verdict("Verdict: Upheld") == verdicts.SUPPORTS
