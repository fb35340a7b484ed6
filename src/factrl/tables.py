"""Markdown tables, the one format every report of factrl prints (the evaluation's tables, the training
summary, the pipeline flow's summary, docs/results.md): here, below every layer that prints one, so a
training summary need not borrow the evaluation's report to draw a table."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A GitHub markdown table: ``header`` cells, then one line per row of ``body``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)
