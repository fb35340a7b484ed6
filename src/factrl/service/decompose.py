"""A text split into claims, each with its character offsets in the text: the service's one call
into :mod:`factrl.verify.decompose` (backends ``sentences`` and ``llm``, by name in
``serve.decomposer``)."""

from __future__ import annotations

from factrl.verify.decompose import ClaimSpan, decompose

__all__ = ["ClaimSpan", "split_claims"]


def split_claims(text: str, backend: str = "sentences", model: str = "") -> list[ClaimSpan]:
    """The check-worthy claims of ``text`` by the decomposer ``backend``, with their offsets; ``model``
    is the ``llm`` backend's endpoint (``openai:MODEL@URL``, params ``serve.decomposer_model``)."""
    return decompose(text, backend=backend, **({"model": model} if backend == "llm" else {}))
