"""The world teacher: answers a question about a demo-world claim from the facts of its gold chain.

The HARIS paper has GPT-4o read a claim's gold evidence and answer the reasoning agent's question
(pseudo ground truth for the search agent, Appendix A.4), or say None when the evidence does not
answer it. On the generated demo world the gold evidence is known as facts: every hop of a claim
(``hops``: the sub-question, its answer, its passage) states one edge ``entity --relation--> answer``
of the world (``factrl.data.world_entities.RELATIONS``). This teacher reads those facts, so its pseudo
answers are right whenever it understands the question, which a 135M model acting as teacher is not.

How a question is understood (:func:`answer_from_chain`):

1. the chain's entities named in it (whole words, case and punctuation ignored, longest first);
2. the relations it names, by each relation's ``cues`` ("director", "founded", "home city"); a
   question naming none may still point at one fact by the kind of answer it wants ("Who ...",
   "Which company ...", "Where ...") when exactly one fact of the entity has that kind;
3. from a named entity, the facts whose relations the question names are followed one after the
   other ("Where was the founder of Orlen Studios born?": founded_by, then born_in).

The answer is the entity the facts lead to. ``None`` when the question names no chain entity,
asks about a relation the chain does not state for it, or reads two ways with different answers.
Facts of the evidence passages that are not hops of the chain are not used.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from factrl.data.world_entities import RELATION, RELATIONS, parse_hop_question

MODEL_NAME = "world-chain"

# the kind of answer a question wants when it names no relation: entity types (world.TYPES)
_KIND_HINTS = (
    (re.compile(r"\bwho(m|se)?\b|\bwhich person\b|\bwhat person\b"), {"person"}),
    (re.compile(r"\b(company|studio|firm)\b"), {"company"}),
    (re.compile(r"\balbum\b"), {"album"}),
    (re.compile(r"\b(city|town)\b"), {"city"}),
    (re.compile(r"\b(where|located|situated|place)\b"), {"city", "country"}),
)


@dataclass(frozen=True)
class Fact:
    """One hop of a gold chain: ``subject --relation--> answer``."""

    subject: str
    relation: str
    answer: str


def _norm(text: str) -> str:
    """Lower case, punctuation as spaces, single spaces (``Cural: Quest`` -> ``cural quest``)."""
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


_QUALIFIER = re.compile(r" \([^()]*\)$")  # a namesake's title: "Kavelo (1994 film)"
_CUES = {rel.name: re.compile(r"\b(" + "|".join(re.escape(c) for c in rel.cues) + ")") for rel in RELATIONS}


def chain_facts(hops: Sequence[Mapping[str, Any]] | None) -> list[Fact]:
    """The facts a claim's hops state (each hop's question is a ``RELATIONS`` template about its
    subject). A hop that matches no template is an error: the claim is not from the demo world."""
    facts = []
    for k, hop in enumerate(hops or ()):
        question, answer = (hop.get("question") or "").strip(), hop.get("answer")
        parsed = parse_hop_question(question)  # any wording's template (factrl.data.world_wordings)
        if parsed is None:
            raise ValueError(f"hop {k}: question {question!r} is not a demo-world sub-question")
        facts.append(Fact(parsed[1], parsed[0].name, answer))
    return facts


def _named(question: str, names: Sequence[str]) -> list[str]:
    """The ``names`` the question mentions as whole words, longest first, no two on the same words."""
    text = f" {_norm(question)} "
    found = []
    # a namesake's title is also found by its bare name ("the 1994 film Kavelo"): the chain's facts
    # name one of the two, and a question about the other is asking about this one's words
    spellings = {(s, n) for n in set(names) for s in (n, _QUALIFIER.sub("", n))}
    for spelling, name in sorted(spellings, key=lambda sn: (-len(_norm(sn[0])), sn)):
        key = f" {_norm(spelling)} "
        if _norm(spelling) and key in text:
            if name not in found:
                found.append(name)
            text = text.replace(key, " | ")  # a shorter name inside this one is not a second mention
    return found


def _follow(subject: str, cues: set[str], kinds: set[str], facts: Sequence[Fact]) -> list[Fact] | None:
    """The facts from ``subject`` that the question's relation ``cues`` (or, without cues, the answer
    ``kinds``) lead through; None when they lead nowhere or two ways."""
    by_subject: dict[str, list[Fact]] = {}
    for f in facts:
        by_subject.setdefault(f.subject, []).append(f)
    if not cues:  # a chain states at most one fact per subject: the one of the wanted kind, if any
        fitting = [f for f in by_subject.get(subject, []) if RELATION[f.relation].dst in kinds]
        return fitting if len(fitting) == 1 else None
    path, pending, here = [], set(cues), subject
    while pending:
        step = [f for f in by_subject.get(here, []) if f.relation in pending]
        if len(step) != 1:
            return None
        path.append(step[0])
        pending.discard(step[0].relation)
        here = step[0].answer
    return path


def resolve(question: str, facts: Sequence[Fact]) -> list[Fact] | None:
    """The chain of facts ``question`` asks about (its last fact holds the answer), or None."""
    if not question or not facts:
        return None
    norm = _norm(question)
    cues = {name for name, pattern in _CUES.items() if pattern.search(norm)}
    kinds = set().union(*(types for pattern, types in _KIND_HINTS if pattern.search(norm)))
    subjects = [n for n in _named(question, [f.subject for f in facts] + [f.answer for f in facts])
                if any(f.subject == n for f in facts)]
    readings = [p for p in (_follow(s, cues, kinds, facts) for s in subjects) if p]
    if len({p[-1].answer for p in readings}) != 1:
        return None  # nothing asked about the chain, or two readings with different answers
    return readings[0]


def answer_from_chain(hops: Sequence[Mapping[str, Any]] | None, question: str | None) -> str | None:
    """The answer to ``question`` that the claim's gold chain gives, or None (see the module doc)."""
    path = resolve(question or "", chain_facts(hops))
    return path[-1].answer if path else None


def rationale(path: Sequence[Fact]) -> str:
    """The facts behind an answer, as sentences ("Orlen Studios was founded by Ilse Parrow.")."""
    return " ".join(f"{f.subject} {RELATION[f.relation].predicate} {f.answer}." for f in path)


def pseudo_answers(llm, items: Sequence[Mapping[str, Any]], *, retries: int = 0, **_: Any) -> list:
    """The ``answer_fn`` of stage ``synthesize`` for ``synthesize.teacher.backend: world``: the same
    contract as ``factrl.signatures.pseudo_answers`` (one ``PseudoAnswer`` per item, ``answer``
    None = the evidence does not answer), read off each item's ``hops``; ``llm`` is not called.

    An item without hops (a claim from outside the demo world) is a failed answer naming the fix.
    """
    from factrl.signatures import PseudoAnswer

    out = []
    for i, item in enumerate(items):
        if not item.get("hops"):
            out.append(PseudoAnswer(None, None, False, f"item {i}: no gold chain (hops); the world teacher answers "
                                    "demo-world claims only, use an LLM teacher for real data", ""))
            continue
        try:
            path = resolve(item["question"], chain_facts(item["hops"]))
        except ValueError as exc:
            out.append(PseudoAnswer(None, None, False, f"item {i}: {exc}", ""))
            continue
        if path is None:
            out.append(PseudoAnswer("The gold chain does not answer this question.", None, True, None, "None"))
        else:
            out.append(PseudoAnswer(rationale(path), path[-1].answer, True, None, path[-1].answer))
    return out


def prompt_hash() -> str:
    """What the world teacher's answers depend on besides the items: this module's code and the
    relations' cues, so a change to either never reuses an old batch checkpoint."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(repr([(r.name, r.question, r.cues) for r in RELATIONS]).encode())
    return h.hexdigest()[:16]


class WorldTeacher:
    """Stands where the teacher LLM stands in stage ``synthesize`` (a name for checkpoints and
    provenance); :func:`pseudo_answers` does the answering, so nothing is ever generated."""

    model_name = MODEL_NAME

    def chat(self, conversations, params, on_result=None):
        raise RuntimeError("the world teacher reads answers off the gold chain (world_teacher.pseudo_answers); "
                           "it has no chat")

    def complete_tokens(self, prompts, params):
        raise RuntimeError("the world teacher generates nothing")
