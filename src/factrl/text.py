"""Answer normalisation and token-level F1 (SQuAD style), shared by the rule-based rewards and the rule judge."""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and English articles, collapse whitespace."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(prediction: str, reference: str) -> float:
    """Token-overlap F1 between the normalised prediction and reference (0.0 when either is empty)."""
    pred = normalize_answer(prediction).split()
    ref = normalize_answer(reference).split()
    if not pred or not ref:
        return 0.0
    common = Counter(pred) & Counter(ref)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred)
    recall = overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def max_token_f1(prediction: str, references: list[str] | tuple[str, ...]) -> float:
    """Best token F1 of ``prediction`` against any of ``references`` (0.0 for none)."""
    return max((token_f1(prediction, r) for r in references), default=0.0)
