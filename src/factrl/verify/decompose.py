"""Long text to claims: split a text into check-worthy claims, each with its place in the text.

``decompose(text, backend="sentences", **options) -> list[ClaimSpan]``; backends by name
(:data:`BACKENDS`):

* ``sentences``: pysbd's rule-based sentence splitter, then check-worthiness rules
  (:func:`check_worthy`): a claim must state a checkable fact about a named entity, so a sentence is
  dropped when it is a question, an opinion or hedge (first person, "maybe", "should", evaluative
  words, an exclamation), has no capitalised name (a capitalised word that is not a sentence-opening
  function word), no verb (copulas, auxiliaries, a list of common verbs, ``-ed`` forms) or fewer
  than ``min_words`` words. Each kept sentence is one claim: ``text`` is the sentence itself.
* ``llm``: any OpenAI-compatible endpoint (``model="openai:MODEL@URL"``, through
  ``factrl.llm.backends.load_llm``) or an LLM object (``llm=``), prompted as SAFE does to rewrite
  the text as self-contained atomic claims (pronouns resolved, one fact each, no opinions). The
  text's sentences are numbered in the prompt and each claim names the sentence it came from, so a
  claim maps back to that sentence's offsets; ``text`` is the rewritten claim, which need not
  appear verbatim. Unparseable output raises :class:`DecomposeError`.

Offsets: ``text[span.start:span.end]`` is always the source span (the sentence, whitespace
stripped), for both backends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from factrl.registry import Registry


@dataclass(frozen=True)
class ClaimSpan:
    """One claim found in a text: ``text`` the claim, ``start`` / ``end`` character offsets into the
    input text of its source span (``input[start:end]``: the sentence it came from)."""

    text: str
    start: int
    end: int


class DecomposeError(ValueError):
    """A backend could not produce claims (an LLM reply that is not the JSON asked for)."""


BACKENDS: Registry[Callable[..., list[ClaimSpan]]] = Registry("decomposer backend")


def decompose(text: str, backend: str = "sentences", **options) -> list[ClaimSpan]:
    """The check-worthy claims of ``text`` by ``backend`` (see the module docstring), in text order."""
    if not isinstance(text, str):
        raise TypeError(f"decompose() takes a string, got {type(text).__name__}")
    if not text.strip():
        return []
    return BACKENDS.lookup(backend)(text, **options)


# --------------------------------------------------------------------------------------------
# sentences
# --------------------------------------------------------------------------------------------


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every sentence of ``text`` (pysbd, English), whitespace stripped, so that
    ``text[start:end]`` is the sentence. Offsets come from finding each segment in order, not from
    pysbd's own char spans (they drift on repeated sentences)."""
    import pysbd

    spans, cursor = [], 0
    for segment in _segmenter(pysbd).segment(text):
        piece = segment.strip()
        if not piece:
            continue
        start = text.find(piece, cursor)
        if start < 0:  # pysbd normalised something: fall back to the raw segment's place
            start = text.find(segment, cursor)
            if start < 0:
                continue
            piece = segment
        spans.append((start, start + len(piece)))
        cursor = start + len(piece)
    return spans


_SEGMENTERS: dict = {}


def _segmenter(pysbd):
    if "en" not in _SEGMENTERS:  # building one compiles its rules: keep it
        _SEGMENTERS["en"] = pysbd.Segmenter(language="en", clean=False)
    return _SEGMENTERS["en"]


# first person, hedges and evaluative words: opinion, not a checkable fact
_OPINION = re.compile(
    r"\b(i|i'm|i've|me|my|we|we're|our|us|you|your|maybe|perhaps|probably|possibly|arguably|apparently|"
    r"seems?|seemed|think|thinks|believe|believes|feel|feels|guess|hope|wish|should|must|might|could|would|"
    r"love|loves|hate|hates|like|likes|best|worst|great|greatest|wonderful|amazing|awesome|terrible|"
    r"awful|boring|fascinating|interesting|beautiful|lovely|nice|favourite|favorite|honestly|frankly|"
    r"sadly|luckily|unfortunately|surely|obviously|clearly|overrated|underrated|matters?)\b", re.IGNORECASE)
# words that open a sentence capitalised without naming anything
_FUNCTION_WORDS = frozenset(
    "a an the this that these those it its he she they them his her their there here then in on at of "
    "for from to by with as and but or so yet if when while after before since because although what "
    "who whom whose which where why how many some all every each no not one".split())
_VERB = re.compile(
    r"\b(is|are|was|were|be|been|being|am|has|have|had|does|do|did|lies|lie|lay|lives|lived|holds|held|"
    r"leads|led|owns|owned|wrote|writes|won|wins|made|makes|built|builds|sang|sings|runs|ran|plays|played|"
    r"founded|born|located|based|headquartered|recorded|directed|produced|developed|published|released|"
    r"created|designed|invented|discovered|married|studied|works|worked|stands|stood|became|becomes|"
    r"belongs|belonged|contains|contained|borders|includes|included|starred|stars|\w{3,}ed)\b",
    re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")


def has_named_entity(sentence: str) -> bool:
    """A capitalised word that is not a sentence-opening function word (``Varna``, ``Orlen``)."""
    return any(w[0].isupper() and w.lower() not in _FUNCTION_WORDS for w in _WORD.findall(sentence))


def check_worthy(sentence: str, min_words: int = 4) -> bool:
    """Whether ``sentence`` states a checkable fact about a named entity (see the module docstring)."""
    s = sentence.strip()
    if s.endswith("?") or s.endswith("!") or len(_WORD.findall(s)) < min_words:
        return False
    return not _OPINION.search(s) and bool(_VERB.search(s)) and has_named_entity(s)


@BACKENDS.register("sentences")
def sentences_backend(text: str, *, min_words: int = 4) -> list[ClaimSpan]:
    """Every check-worthy sentence of ``text`` as a claim (``text`` = the sentence)."""
    return [ClaimSpan(text[a:b], a, b) for a, b in sentence_spans(text) if check_worthy(text[a:b], min_words)]


# --------------------------------------------------------------------------------------------
# llm
# --------------------------------------------------------------------------------------------

# SAFE's decomposition (Wei et al. 2024) asks for self-contained, atomic facts with every pronoun and
# vague reference replaced by the entity it names; the sentence numbers map claims back to offsets.
LLM_SYSTEM = """\
You split a text into atomic claims that a fact-checker can verify one by one.
Rules:
1. Each claim states exactly one fact and is self-contained: name every person, place, company or \
work explicitly; never write "he", "she", "it", "they" or "this".
2. Leave out opinions, feelings, guesses, advice and questions.
3. Copy names exactly as the text writes them.
Answer with JSON only, in this form:
{"claims": [{"claim": "...", "sentence": 1}]}
where "sentence" is the number of the sentence the claim comes from."""


def llm_messages(text: str, spans: list[tuple[int, int]]) -> list[dict]:
    """The chat messages asking an LLM to decompose ``text``, its sentences numbered from 1."""
    numbered = "\n".join(f"[{i + 1}] {text[a:b]}" for i, (a, b) in enumerate(spans))
    return [{"role": "system", "content": LLM_SYSTEM}, {"role": "user", "content": f"Text:\n{numbered}"}]


def parse_llm_claims(reply: str) -> list[dict]:
    """The ``[{"claim": str, "sentence": int | None}]`` of a reply: the first JSON object (or list)
    in it, ``claims`` taken from an object; strings stand for claims without a sentence."""
    start = min((i for i in (reply.find("{"), reply.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise DecomposeError(f"no JSON in the reply: {reply[:200]!r}")
    try:
        data, _ = json.JSONDecoder().raw_decode(reply[start:])
    except json.JSONDecodeError as err:
        raise DecomposeError(f"unparseable JSON in the reply ({err}): {reply[:200]!r}") from None
    items = data.get("claims") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise DecomposeError(f"the reply's JSON has no claims list: {reply[:200]!r}")
    out = []
    for item in items:
        if isinstance(item, str):
            item = {"claim": item}
        if not isinstance(item, dict) or not isinstance(item.get("claim"), str) or not item["claim"].strip():
            continue
        sentence = item.get("sentence")
        out.append({"claim": item["claim"].strip(),
                    "sentence": sentence if isinstance(sentence, int) and not isinstance(sentence, bool) else None})
    return out


def _overlap_sentence(claim: str, text: str, spans: list[tuple[int, int]]) -> int:
    """The index of the sentence sharing the most words with ``claim`` (the first on ties)."""
    words = {w.lower() for w in _WORD.findall(claim)}
    scores = [len(words & {w.lower() for w in _WORD.findall(text[a:b])}) for a, b in spans]
    return max(range(len(spans)), key=lambda i: (scores[i], -i))


@BACKENDS.register("llm")
def llm_backend(text: str, *, model: str | None = None, llm=None, max_tokens: int = 512) -> list[ClaimSpan]:
    """Claims written by an LLM (``llm``, or the one ``model`` names, e.g. ``openai:MODEL@URL``),
    each mapped to the offsets of the sentence it names (else the sentence it overlaps most)."""
    from factrl.llm.base import SamplingParams

    if llm is None:
        if not model:
            raise ValueError("the llm decomposer needs model='openai:MODEL@URL' (or llm=an LLM object)")
        from factrl.llm.backends import load_llm

        llm = _cached_llm(model, load_llm)
    spans = sentence_spans(text)
    if not spans:
        return []
    [[reply]] = llm.chat([llm_messages(text, spans)], SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=0))
    out = []
    for item in parse_llm_claims(reply.text):
        n = item["sentence"]
        i = n - 1 if n is not None and 1 <= n <= len(spans) else _overlap_sentence(item["claim"], text, spans)
        a, b = spans[i]
        out.append(ClaimSpan(item["claim"], a, b))
    return sorted(out, key=lambda c: (c.start, c.end))


_LLMS: dict = {}


def _cached_llm(model: str, load: Callable):
    if model not in _LLMS:
        _LLMS[model] = load(model)
    return _LLMS[model]
