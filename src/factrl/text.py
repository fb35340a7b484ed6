"""Answer normalisation and token-level F1 (SQuAD style), shared by the rule-based rewards and the rule judge;
a reply's first sentence (debate summaries, the naive RAG baseline's unboxed answer);
number extraction and normalisation (MARCH compares numbers: ``1,200`` = ``1200`` = ``1.2 thousand``)."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

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


def first_sentence(text: str, words: int) -> str:
    """The first sentence of ``text`` (up to the first ``.``, ``!`` or ``?`` followed by a space), cut
    to ``words`` words; whitespace collapsed."""
    sentence = re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]
    return " ".join(sentence.split()[:words])


# --- numbers ----------------------------------------------------------------------------------

_UNITS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
          "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_SCALES = {"thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_SUFFIX = {"k": 1_000, "mn": 1_000_000, "bn": 1_000_000_000, **_SCALES}
_NUMBER_WORDS = set(_UNITS) | set(_TENS) | set(_SCALES) | {"hundred"}
# 1,234,567.5 | 1234.5 | .5, then an optional magnitude (12k, 1.5 million); not inside a word
_DIGITS = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
                     r"(?:\s*(k|mn|bn|thousand|million|billion)\b)?", re.IGNORECASE)
_WORD = re.compile(r"[a-z]+", re.IGNORECASE)


def _canonical(value: float) -> str:
    """``1200.0`` -> ``"1200"``, ``3.50`` -> ``"3.5"``: one spelling per number."""
    if value == int(value):
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _words_value(words: Sequence[str]) -> int | None:
    """``["two", "thousand", "and", "five"]`` -> 2005; None when the words do not spell one number
    (``five six``, ``five and six``)."""
    total, current, seen, last = 0, 0, False, None
    for w in words:
        if w == "and":
            if last not in ("hundred", "scale"):  # "one hundred and two", never "five and six"
                return None
            continue
        if w in _UNITS or w in _TENS:
            kind = "unit" if w in _UNITS else "tens"
            if last == "unit" or (last == "tens" and kind == "tens"):
                return None
            current += _UNITS.get(w, 0) + _TENS.get(w, 0)
            last = kind
        elif w == "hundred":
            if last == "hundred":
                return None
            current = max(current, 1) * 100
            last = "hundred"
        elif w in _SCALES:
            total += max(current, 1) * _SCALES[w]
            current, last = 0, "scale"
        else:
            return None
        seen = True
    return total + current if seen else None


def _written_numbers(text: str) -> list[tuple[int, int, int]]:
    """``(start, end, value)`` of every run of number words (``forty-five``, ``one hundred and two``).
    A lone ``one`` is left out: in prose it is mostly a pronoun ("one of the films")."""
    out: list[tuple[int, int, int]] = []
    run: list[tuple[int, int, str]] = []

    def flush() -> None:
        while run and run[-1][2] == "and":  # "five hundred and" ends at hundred
            run.pop()
        if run and [w for _, _, w in run] != ["one"]:
            value = _words_value([w for _, _, w in run])
            if value is not None:
                out.append((run[0][0], run[-1][1], value))
        run.clear()

    last_end = 0
    for m in _WORD.finditer(text):
        word = m.group(0).lower()
        joined = bool(run) and text[last_end:m.start()].strip(" -") == ""  # spaces or hyphens between
        if word in _NUMBER_WORDS or (word == "and" and run):
            if not joined:
                flush()
            run.append((m.start(), m.end(), word))
        else:
            flush()
        last_end = m.end()
    flush()
    return out


def extract_numbers(text: str) -> list[str]:
    """Every number stated in ``text``, canonical (see the module docstring), in reading order."""
    if not isinstance(text, str):
        return []
    found: list[tuple[int, str]] = []
    masked = list(text)
    for m in _DIGITS.finditer(text):
        value = float(m.group(1).replace(",", ""))
        if m.group(2):
            value *= _SUFFIX[m.group(2).lower()]
        found.append((m.start(), _canonical(value)))
        masked[m.start():m.end()] = " " * (m.end() - m.start())
    found += [(start, str(value)) for start, _, value in _written_numbers("".join(masked))]
    return [v for _, v in sorted(found)]


def normalize_number(text: str | None) -> str | None:
    """The one number ``text`` states, canonical; None when it states none or several."""
    numbers = extract_numbers(text or "")
    return numbers[0] if len(numbers) == 1 else None


