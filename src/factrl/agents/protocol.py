"""The tag grammar the two HARIS agents speak, a parser that never raises, and format validity.

Reasoning agent (verifies a claim, delegates fact finding)::

    <think>...</think> <question>...</question> <result>...</result> ... <think>...</think>
    <verification>... \\boxed{Support} ...</verification>

Search agent (answers one question by searching several times)::

    <think>...</think> <search>...</search> <result>...</result> ... <report>...</report>

``<result>`` spans are injected by the environment (the rollout engine), never generated. The
parser works on the agent's whole response (generated text plus injected results).

Parsing is flat, not recursive: a segment opened by ``<x>`` ends at the first ``</x>``; any other
tag inside it is kept as text (and makes the format invalid when it sits in a generated span).
Stray closing tags are text outside tags. An unclosed segment runs to the end of the text and is
marked ``closed=False``. The format checks are what the rewards use (R = 0 for an invalid format).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from factrl.verdicts import REFUTES, SUPPORTS, VERDICT_WORDS  # noqa: F401  (SUPPORTS / REFUTES: re-exported)

REASONING_TAGS = ("think", "question", "result", "verification")
SEARCH_TAGS = ("think", "search", "result", "report")
# the single-agent baseline: searches itself and decides alone
SINGLE_AGENT_TAGS = ("think", "search", "result", "verification")
ALL_TAGS = tuple(dict.fromkeys(REASONING_TAGS + SEARCH_TAGS))



def tag_regex(tags: tuple[str, ...]) -> re.Pattern:
    """The pattern of the open and close tags of ``tags`` (group 1: ``/`` or empty, group 2: the tag)."""
    return re.compile(r"<(/?)(" + "|".join(tags) + r")\s*>")


_TAG_RE = tag_regex(ALL_TAGS)
# \boxed{Support}, \boxed{ supported }, \boxed{\text{Refute}}: lenient on the word's ending and case
_BOXED_RE = re.compile(r"\\boxed\s*\{\s*(?:\\text\s*\{\s*)?([A-Za-z]+)\s*\}?\s*\}")


@dataclass(frozen=True)
class Segment:
    """A run of text: inside ``<tag>...</tag>`` (tag set) or outside any tag (tag None).

    closed: False when the text ended before the segment's closing tag.
    """

    tag: str | None
    text: str
    closed: bool = True


@dataclass(frozen=True)
class ReasoningParse:
    questions: tuple[str, ...]
    verdict: str | None  # "SUPPORTS" | "REFUTES" | None
    format_valid: bool
    error: str | None  # the first format violation; None when valid


@dataclass(frozen=True)
class SearchParse:
    queries: tuple[str, ...]
    report: str | None
    format_valid: bool
    error: str | None


def parse_tags(text: str, tag_re: re.Pattern = _TAG_RE) -> list[Segment]:
    """Split ``text`` into tagged and untagged segments (flat; never raises). ``tag_re``: the tag
    set (:func:`tag_regex`; HARIS's tags by default, M2R's in ``factrl.agents.m2r``)."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    segments: list[Segment] = []
    pos = 0
    outside_start = 0
    while True:
        m = tag_re.search(text, pos)
        if m is None:
            break
        if m.group(1):  # a closing tag with nothing open: stays in the outside text
            pos = m.end()
            continue
        tag = m.group(2)
        if m.start() > outside_start:
            segments.append(Segment(None, text[outside_start : m.start()]))
        close = re.compile(r"</" + tag + r"\s*>").search(text, m.end())
        if close is None:
            segments.append(Segment(tag, text[m.end() :], closed=False))
            return segments
        segments.append(Segment(tag, text[m.end() : close.start()]))
        pos = outside_start = close.end()
    if outside_start < len(text):
        segments.append(Segment(None, text[outside_start:]))
    return segments


def escape_tags(text: str, tag_re: re.Pattern = _TAG_RE) -> str:
    """Neutralise protocol tags inside injected text (retrieved passages, reports) so that a
    passage containing ``</result>`` cannot end the result span early: ``<x>`` becomes ``[x]``."""
    return tag_re.sub(lambda m: f"[{m.group(1)}{m.group(2)}]", text)


def boxed_verdict(text: str) -> str | None:
    """The last ``\\boxed{Support|Refute}`` in ``text`` as SUPPORTS / REFUTES, else None."""
    found = None
    for m in _BOXED_RE.finditer(text):
        word = VERDICT_WORDS.get(m.group(1).lower())
        if word is not None:
            found = word
    return found


def boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, content)`` of every ``\\boxed{...}`` in ``text`` (nested braces balanced), in order:
    the answer format of M2R's answers and MAPoRL's guards, beside :func:`boxed_verdict`."""
    out: list[tuple[int, int, str]] = []
    start = 0
    while (i := text.find("\\boxed{", start)) != -1:
        j = i + len("\\boxed{")
        depth, k = 1, j
        while k < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        if depth:  # no closing brace: nothing more to extract
            break
        out.append((i, k, text[j : k - 1].strip()))
        start = k
    return out


def extract_boxed(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` in ``text``, in order."""
    return [content for _, _, content in boxed_spans(text)]


def span_error(segments: list[Segment], allowed: tuple[str, ...], containers: tuple[str, ...] = ("result",),
               tag_re: re.Pattern = _TAG_RE) -> str | None:
    """First violation of: only ``allowed`` tags, all closed, no loose text, no tag inside a span
    other than ``containers`` (injected results, which may quote anything)."""
    for s in segments:
        if s.tag is None:
            if s.text.strip():
                return "text outside tags"
            continue
        if s.tag not in allowed:
            return f"tag <{s.tag}> not allowed"
        if not s.closed:
            return f"unclosed <{s.tag}>"
        if s.tag not in containers and tag_re.search(s.text):
            return f"nested tag inside <{s.tag}>"
    return None


def sequence_error(tagged: list[Segment], action: str, result: str = "result") -> str | None:
    """First violation of: each ``action`` answered by a ``result`` right after it, and results only
    after actions (``tagged``: the tagged segments in order)."""
    for prev, cur in zip(tagged, tagged[1:] + [None]):
        if prev.tag == action and (cur is None or cur.tag != result):
            return f"<{action}> without a following <{result}>"
    for prev, cur in zip([None] + tagged, tagged):
        if cur.tag == result and (prev is None or prev.tag != action):
            return f"<{result}> not preceded by <{action}>"
    return None


def _structure_error(segments: list[Segment], allowed: tuple[str, ...], action: str, final: str) -> str | None:
    """First violation of: only ``allowed`` tags, all closed, no nested tags in generated spans,
    no loose text, each ``action`` answered by a result, results only after actions, exactly one
    ``final`` segment and it comes last."""
    tagged = [s for s in segments if s.tag is not None]
    error = span_error(segments, allowed)
    if error is not None:
        return error
    if not tagged:
        return "no tags"
    error = sequence_error(tagged, action)
    if error is not None:
        return error
    finals = [s for s in tagged if s.tag == final]
    if len(finals) != 1:
        return f"expected exactly one <{final}>, found {len(finals)}"
    if tagged[-1].tag != final:
        return f"<{final}> is not the last segment"
    if any(s.tag == action and not s.text.strip() for s in tagged):
        return f"empty <{action}>"
    return None


def parse_reasoning(text: str) -> ReasoningParse:
    """Questions asked, the verdict and format validity of a reasoning-agent response."""
    return _parse_verifier(text, REASONING_TAGS, "question")


def parse_single_agent(text: str) -> ReasoningParse:
    """The single-agent baseline's response: ``questions`` holds its search queries."""
    return _parse_verifier(text, SINGLE_AGENT_TAGS, "search")


def _parse_verifier(text: str, allowed: tuple[str, ...], action: str) -> ReasoningParse:
    try:
        segments = parse_tags(text)
        questions = tuple(s.text.strip() for s in segments if s.tag == action and s.text.strip())
        verifications = [s for s in segments if s.tag == "verification"]
        verdict = boxed_verdict(verifications[-1].text) if verifications else None
        error = _structure_error(segments, allowed, action, "verification")
        if error is None:
            boxes = [m for m in _BOXED_RE.finditer(verifications[-1].text)
                     if m.group(1).lower() in VERDICT_WORDS]
            if verdict is None:
                error = "no \\boxed{Support} or \\boxed{Refute} in <verification>"
            elif len({VERDICT_WORDS[m.group(1).lower()] for m in boxes}) > 1:
                error = "conflicting verdicts in <verification>"
        return ReasoningParse(questions, verdict, error is None, error)
    except Exception as exc:  # the parser must never take a rollout or a reward down
        return ReasoningParse((), None, False, f"parser error: {exc!r}")


def parse_search(text: str) -> SearchParse:
    """Queries issued, the final report and format validity of a search-agent response."""
    try:
        segments = parse_tags(text)
        queries = tuple(s.text.strip() for s in segments if s.tag == "search" and s.text.strip())
        reports = [s for s in segments if s.tag == "report"]
        report = reports[-1].text.strip() if reports else None
        error = _structure_error(segments, SEARCH_TAGS, "search", "report")
        if error is None and not report:
            error = "empty <report>"
        return SearchParse(queries, report or None, error is None, error)
    except Exception as exc:
        return SearchParse((), None, False, f"parser error: {exc!r}")


PARSERS = {"reasoning": parse_reasoning, "search": parse_search}
"""Each protocol role's parser (the roles of ``factrl.agents.registry``'s agents)."""


def format_valid(text: str, agent: str) -> bool:
    """Format validity of a response of the role ``agent`` ("reasoning" | "search"), as the rewards use it."""
    if agent not in PARSERS:
        raise ValueError(f"unknown agent {agent!r}: expected one of {sorted(PARSERS)}")
    return PARSERS[agent](text).format_valid
