"""Citations: the sentence of a retrieved passage that backs what a search agent reported.

A HARIS verdict rests on the search agent's reports, one per question. For each report, the
citation is the sentence, among the passages *that search rollout retrieved* (never any other
passage of the index), sharing the most content words with the report; it is quoted with its
character offsets in the passage text, so ``passage.text[start:end] == quote`` always holds.
Token overlap is enough here: the reports restate the passages' sentences (the search agent was
trained to), and a citation with no shared content word is not made.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# A sentence: up to a terminal mark followed by a space and a capital/digit/quote, or the end. The
# demo world's and Wikipedia-like passages need no more than this.
_SENTENCE_END = re.compile(r"(?<=[.!?])([\"')\]]*)\s+(?=[A-Z0-9\"'(\[])")
_WORD = re.compile(r"[A-Za-z0-9]+")
STOPWORDS = frozenset("""a an the of in on at to for by with from and or but is are was were be been being
it its this that these those as into about which who whom whose what when where how than then
there their he she his her they them not no yes does did do has have had also""".split())


@dataclass(frozen=True)
class Citation:
    """One cited sentence: ``quote == passage_text[start:end]`` (the whole passage is kept so a page
    can show the sentence in place); ``overlap`` is the number of content words it shares with
    ``report``, the search agent's answer to ``question``."""

    passage_id: str
    title: str | None
    quote: str
    start: int
    end: int
    question: str
    report: str
    overlap: int
    passage_text: str

    def to_dict(self) -> dict:
        return asdict(self)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every sentence of ``text``, surrounding whitespace excluded."""
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        spans.append((start, m.end(1)))  # closing quotes and brackets stay with their sentence
        start = m.end()
    spans.append((start, len(text)))
    out = []
    for a, b in spans:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b > a:
            out.append((a, b))
    return out


def content_words(text: str) -> set[str]:
    """Lower-cased words of ``text`` without stopwords."""
    return {w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in STOPWORDS}


def best_sentence(hits: Sequence, report: str) -> tuple[object, int, int, int] | None:
    """``(hit, start, end, overlap)`` of the sentence of ``hits`` (objects with ``id``, ``title``,
    ``text``) sharing the most content words with ``report``; ties go to the earlier hit (ranked
    higher) and the shorter sentence. None when no sentence shares a word."""
    want = content_words(report)
    best, best_key = None, None
    for rank, hit in enumerate(hits):
        for start, end in sentence_spans(hit.text):
            overlap = len(want & content_words(hit.text[start:end]))
            key = (overlap, -rank, -(end - start))
            if overlap > 0 and (best_key is None or key > best_key):
                best, best_key = (hit, start, end, overlap), key
    return best


def cite(question: str, report: str, hits: Sequence) -> Citation | None:
    """The citation of one question's report among the passages its search retrieved (``hits``)."""
    found = best_sentence(hits, report)
    if found is None:
        return None
    hit, start, end, overlap = found
    return Citation(str(hit.id), hit.title, hit.text[start:end], start, end, question, report, overlap, hit.text)


def dedupe(citations: Sequence[Citation]) -> list[Citation]:
    """Citations in order, each (passage, sentence) once."""
    seen, out = set(), []
    for c in citations:
        if (c.passage_id, c.start) not in seen:
            seen.add((c.passage_id, c.start))
            out.append(c)
    return out
