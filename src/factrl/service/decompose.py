"""A text split into claims, each with its character offsets in the text.

The service calls :func:`split_claims` only, so the decomposer is chosen in one place. Until
``factrl.verify.decompose`` (the ``sentences`` and ``llm`` backends with check-worthiness rules) is
merged, a plain sentence splitter stands in for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ClaimSpan:
    """One claim of a text: ``text[start:end]`` of the source text (``factrl.verify.decompose``'s type)."""

    text: str
    start: int
    end: int


# replaced by factrl.verify.decompose when merged
_SENTENCE = re.compile(r"[^.!?]*[^.!?\s][^.!?]*(?:[.!?]+|$)")


def decompose(text: str, backend: str = "sentences", **options) -> list[ClaimSpan]:
    """Sentences of ``text`` as claims, with offsets (placeholder for ``factrl.verify.decompose``).

    replaced by factrl.verify.decompose when merged"""
    if backend != "sentences":
        raise ValueError(f"decomposer {backend!r} is not available yet; use 'sentences'")
    spans = []
    for m in _SENTENCE.finditer(text):
        start, end = m.start(), m.end()
        while start < end and text[start].isspace():
            start += 1
        if end > start:
            spans.append(ClaimSpan(text[start:end], start, end))
    return spans


def split_claims(text: str, backend: str = "sentences") -> list[ClaimSpan]:
    """The claims of ``text`` by the decomposer ``backend``: the one call the service makes."""
    return decompose(text, backend=backend)
