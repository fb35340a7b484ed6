"""Tools the agents call, kept apart from the multi-turn loop (as verl's ``tools/base_tool.py``).

A tool names the closing action tag that pauses generation (``stop_tag``) and answers a batch of
queries at once: the rollout engine collects every paused sequence of a step and calls the tool
one time for all of them.

* :class:`RetrieverTool`: ``</search>`` -> top-k passages from a :class:`~factrl.retrieval.index.Retriever`
  or a :class:`~factrl.retrieval.client.RetrievalClient` (both have ``search(queries, k)``).
* :class:`SearchAgentTool`: ``</question>`` -> one full search-agent rollout per question; the
  result is the search agent's ``<report>`` (what HARIS's reasoning agent receives). It is an
  agentic tool: its :meth:`~SearchAgentTool.loop` runs inside the asking trajectory's agent loop.
* :class:`Toolbox`: several tools in one trajectory, each behind its own stop tag (M2R's macro
  retrieval, key-information saving and micro retrieval, ``factrl.agents.m2r``).

A tool's answer is injected inside ``<result>...</result>`` unless the tool names another wrapper
tag in ``result_tag`` (M2R's ``<micro_response>``) or None (the answer is injected as it is; an
empty answer injects nothing).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from factrl.agents.loop import AgentLoop, run_loops
from factrl.agents.protocol import escape_tags

NO_QUERY = "No query was given: write the query between the tags."
NO_HITS = "No passage matched the query."


@runtime_checkable
class Tool(Protocol):
    """An environment action: ``stop_tag`` pauses generation; ``__call__`` answers a batch."""

    stop_tag: str  # e.g. "</search>"; the matching open tag is ``stop_tag.replace("</", "<")``
    name: str

    def __call__(self, queries: list[str]) -> list[str]:
        ...


RESULT_TAG = "result"  # the wrapper of a tool's answer unless the tool sets ``result_tag``


def result_tag(tool) -> str | None:
    """The tag an answer of ``tool`` is wrapped in (None: injected as it is)."""
    return getattr(tool, "result_tag", RESULT_TAG)


class Toolbox:
    """Several tools of one trajectory, each behind its own stop tag; the rollout loop calls the one
    whose tag ended the turn. Any tool works in a toolbox (a batched tool, an agentic one)."""

    name = "toolbox"

    def __init__(self, *tools) -> None:
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.stop_tag in self.tools:
                raise ValueError(f"two tools stop on {tool.stop_tag!r}: {self.tools[tool.stop_tag].name!r} "
                                 f"and {tool.name!r}")
            self.tools[tool.stop_tag] = tool


def tools_by_tag(tool) -> dict[str, Tool]:
    """``{stop tag: tool}`` of what a rollout was given: nothing, one tool or a :class:`Toolbox`."""
    if tool is None:
        return {}
    if isinstance(tool, Toolbox):
        return dict(tool.tools)
    return {tool.stop_tag: tool}


def open_tag(stop_tag: str) -> str:
    """``</search>`` -> ``<search>``."""
    return stop_tag.replace("</", "<", 1)


def format_hits(hits) -> str:
    """Passages as the agents read them: numbered, title first (the title carries the entity)."""
    if not hits:
        return NO_HITS
    lines = []
    for i, hit in enumerate(hits, 1):
        title = f"({hit.title}) " if hit.title else ""
        lines.append(f"Doc {i} {title}{hit.text}")
    return escape_tags("\n".join(lines))


class RetrieverTool:
    """Top-``k`` retrieval (the paper uses top-3) behind ``</search>``."""

    name = "retriever"

    def __init__(self, retriever, k: int = 3, stop_tag: str = "</search>") -> None:
        if not hasattr(retriever, "search"):
            raise TypeError(f"{retriever!r} has no search(queries, k) method")
        self.retriever = retriever
        self.k = k
        self.stop_tag = stop_tag
        self.calls = 0  # batched calls made, for tests and benchmarks

    def search(self, queries: Sequence[str]) -> list[list]:
        """Raw hits per query; empty queries get no hits without reaching the retriever."""
        live = [i for i, q in enumerate(queries) if q.strip()]
        hits: list[list] = [[] for _ in queries]
        if live:
            self.calls += 1
            found = self.retriever.search([queries[i].strip() for i in live], k=self.k)
            for i, row in zip(live, found):
                hits[i] = list(row)
        return hits

    def __call__(self, queries: list[str]) -> list[str]:
        hits = self.search(queries)
        return [format_hits(h) if q.strip() else NO_QUERY for q, h in zip(queries, hits)]


class SearchAgentTool:
    """Answers each question with a full search-agent rollout and returns its report.

    ``search_loop(question, stream)`` is the search agent's loop for one question (see
    :func:`factrl.agents.haris.search_agent_loop`); it returns an object with ``report`` (str or
    None) and ``trajectory`` attributes. Inside a reasoning rollout the tool's :meth:`loop` runs
    within the asking trajectory's own agent loop, so each search agent starts the moment its
    question is asked and decodes alongside every other trajectory. The search results of every
    question are kept in ``history`` so label synthesis and training can reuse them.
    """

    name = "search_agent"

    def __init__(self, search_loop: Callable[[str, int], AgentLoop], stop_tag: str = "</question>",
                 keep_history: bool = True) -> None:
        self.search_loop = search_loop
        self.stop_tag = stop_tag
        self.keep_history = keep_history
        self.history: list = []  # (question, search result object) in the order answers arrived
        self._streams = itertools.count()  # one sampler stream per search rollout

    def loop(self, question: str) -> AgentLoop[str]:
        """The answer to one question, as an agent loop (the search agent's own turns)."""
        question = question.strip()
        if not question:
            return NO_QUERY
        res = yield from self.search_loop(question, next(self._streams))
        if self.keep_history:
            self.history.append((question, res))
        return escape_tags(res.report) if res.report else fallback_report(res)

    def __call__(self, queries: list[str]) -> list[str]:
        return run_loops([self.loop(q) for q in queries])


def fallback_report(res) -> str:
    """What the reasoning agent reads when the search agent gave no ``<report>``: the passages it
    retrieved (its injected results), so a malformed search rollout still passes on evidence."""
    found = getattr(res, "retrieved", None) or []
    if found:
        return escape_tags("\n".join(found))
    return "The search agent found no information."
