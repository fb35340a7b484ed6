"""The evidence of one HARIS run: per question, what its search retrieved and read, the report, and
the sentence cited for it; and the run's grounding (``factrl.agents.abstain``).

One home for what ``factrl serve`` shows (``factrl.service.engine``), what ``evaluate`` scores
(``factrl.agents.systems_registry.haris_runs``) and what ``factrl verify`` prints, so the three decide
NOT ENOUGH INFO from the same citations. The retriever is wrapped in a :class:`RecordingRetriever` for
the batch, so each search rollout's hits are known by id: citations come only from those
(``factrl.agents.citations``), and only from passages whose text was in the answer that rollout read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from factrl.agents.abstain import CitedSentence, Grounding, grounding
from factrl.agents.citations import Citation, cite, dedupe
from factrl.agents.protocol import escape_tags


class RecordingRetriever:
    """A retriever that remembers the hits it returned for every query (by its stripped text)."""

    def __init__(self, retriever) -> None:
        self.retriever = retriever
        self.hits: dict[str, list] = {}

    def search(self, queries: Sequence[str], k: int = 3) -> list[list]:
        found = self.retriever.search(list(queries), k=k)
        for query, hits in zip(queries, found):
            self.hits[query.strip()] = list(hits)
        return found


def seen_hits(search, recorded: Mapping[str, list]) -> list:
    """The passages one search rollout retrieved *and read*: the hits of each of its queries whose
    text is in the answers injected into that rollout; each passage once, in rank order."""
    read = "\n".join(search.trajectory.results)
    out, ids = [], set()
    for query in search.trajectory.queries:
        for hit in recorded.get(query.strip(), []):
            if hit.id not in ids and escape_tags(hit.text) in read:
                ids.add(hit.id)
                out.append(hit)
    return out


@dataclass
class RunEvidence:
    """``questions``: per question asked, ``{question, searches, retrieved: [{id, title}], report,
    result}``; ``citations``: the cited sentences, each (passage, sentence) once."""

    claim: str
    questions: list[dict] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    read: list[str] = field(default_factory=list)  # each passage the searches read, "title. text", once

    @property
    def searched(self) -> list[str]:
        """Every search query of the run, in order, each once (what a NOT ENOUGH INFO answer shows)."""
        out: list[str] = []
        for q in self.questions:
            for s in q["searches"]:
                if s not in out:
                    out.append(s)
        return out

    def grounding(self) -> Grounding:
        """How far the citations bear on the claim (``factrl.agents.abstain.grounding``)."""
        cited = [CitedSentence(c.quote, c.title, c.question) for c in self.citations]
        return grounding(self.claim, cited, [q["question"] for q in self.questions], read=self.read)


def run_evidence(run, recorded: Mapping[str, list], seen=None) -> RunEvidence:
    """The evidence of ``run`` (a :class:`factrl.agents.haris.HarisResult`) from the hits
    ``recorded`` by a :class:`RecordingRetriever` during its batch; ``seen(search, recorded)``: which
    hits a search read (default :func:`seen_hits`)."""
    seen = seen or seen_hits
    evidence = RunEvidence(run.claim)
    citations, read_ids = [], set()
    for i, question in enumerate(run.trajectory.queries):
        search = run.searches[i] if i < len(run.searches) else None
        read = run.trajectory.results[i] if i < len(run.trajectory.results) else ""
        hits = seen(search, recorded) if search is not None else []
        report = (search.report if search is not None else None) or ""
        evidence.questions.append({"question": question,
                                   "searches": list(search.trajectory.queries) if search is not None else [],
                                   "retrieved": [{"id": str(h.id), "title": h.title} for h in hits],
                                   "report": report or None, "result": read})
        for h in hits:
            if h.id not in read_ids:
                read_ids.add(h.id)
                evidence.read.append(f"{h.title}. {h.text}" if h.title else h.text)
        found = cite(question, report or read, hits)
        if found is not None:
            citations.append(found)
    evidence.citations = dedupe(citations)
    return evidence
