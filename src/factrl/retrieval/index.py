"""Build, save, load and search passage indexes: BM25, dense FAISS and hybrid.

Layout of an index directory::

    manifest.json        embedder name, dim, count, FAISS type, sha256 of the passage ids
    passages.parquet     id / title / text, row i is document i in every index
    bm25/                bm25s index
    dense.faiss          FAISS index over the normalised embeddings (inner product)
    chunks/              per-chunk embeddings while building; removed once the index is written

Embedding streams the passages Parquet file in chunks and writes each finished chunk atomically,
so a killed build re-run with the same arguments skips every finished chunk and produces the
same index as an uninterrupted run. The manifest is written last: its presence marks a complete
index.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from factrl.io import atomic_path, write_json
from factrl.retrieval.embed import Embedder, load_embedder

FAISS_TYPES = ("flat", "hnsw", "hnsw_sq8", "ivfpq")
MODES = ("bm25", "dense", "hybrid")
RRF_K = 60  # the constant from Cormack et al.; damps the weight of the very top ranks
MANIFEST = "manifest.json"


class IndexMismatchError(ValueError):
    """An index was opened with an embedder other than the one that built it."""


@dataclass(frozen=True)
class Hit:
    """One retrieved passage."""

    id: str
    title: str
    text: str
    score: float


def passage_text(title: str | None, text: str) -> str:
    """The string that gets embedded and BM25-indexed: the title carries entity names."""
    return f"{title}\n{text}" if title else text


def _iter_batches(path: Path, chunk_size: int) -> Iterator[pa.RecordBatch]:
    yield from pq.ParquetFile(path).iter_batches(
        batch_size=chunk_size, columns=["id", "title", "text"]
    )


def _texts(batch: pa.RecordBatch) -> list[str]:
    titles = batch.column("title").to_pylist()
    return [passage_text(t, x) for t, x in zip(titles, batch.column("text").to_pylist())]


def embed_chunks(
    passages: Path,
    chunk_dir: Path,
    embedder: Embedder,
    chunk_size: int,
    progress: Callable[[int], None] | None = None,
) -> list[Path]:
    """Embed ``passages`` chunk by chunk into ``chunk_dir``; finished chunks are skipped."""
    chunk_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, batch in enumerate(_iter_batches(passages, chunk_size)):
        path = chunk_dir / f"chunk_{i:06d}.npy"
        paths.append(path)
        if not path.exists():
            vectors = embedder.encode_passages(_texts(batch))
            with atomic_path(path) as tmp:
                with open(tmp, "wb") as fh:
                    np.save(fh, vectors)
        if progress is not None:
            progress(batch.num_rows)
    return paths


# A denser graph build (FAISS's default is 40) costs ~2.5x build time and buys recall at every
# efSearch: at 200k noisy e5 vectors, recall@3 0.94 -> 0.96 at efSearch 64 (bench/retrieval.py).
HNSW_EF_CONSTRUCTION = 200



def import_faiss():
    """The ``faiss`` module, its loader's lines silenced: at INFO level (which the evaluate stage's
    logging shows) it logs each SIMD build it tries and fails to find ("Loading faiss with AVX512
    support", "Could not load library ..."), four lines a user can do nothing about."""
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    import faiss

    return faiss

def hnsw_of(index):
    """The HNSW graph parameters of a FAISS index (through a refine wrapper), or None."""
    faiss = import_faiss()

    if hasattr(index, "base_index"):
        index = faiss.downcast_index(index.base_index)
    return getattr(index, "hnsw", None)


def _new_faiss(kind: str, dim: int, count: int, hnsw_m: int = 32):
    faiss = import_faiss()

    if kind == "flat":
        return faiss.IndexFlatIP(dim)
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        index.hnsw.efSearch = 64
        return index
    if kind == "hnsw_sq8":
        # The graph walk compares 8-bit codes (4x less memory traffic per distance), then the
        # k x 4 best are re-ranked exactly against the float vectors: about twice the queries/s of
        # ``hnsw`` at the same recall, for 1.25x its memory (float vectors + codes).
        graph = faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        graph.hnsw.efSearch = 128
        index = faiss.IndexRefineFlat(graph)
        index.k_factor = 4
        return index
    if kind == "ivfpq":
        # sqrt(n) lists is the usual rule; PQ with 8-bit codes, dim/8 sub-quantizers (48 for 384-d).
        nlist = max(1, min(4096, int(np.sqrt(count))))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQ(quantizer, dim, nlist, max(1, dim // 8), 8, faiss.METRIC_INNER_PRODUCT)
        index.nprobe = min(nlist, 16)
        return index
    raise ValueError(f"unknown FAISS type {kind!r}; choose one of {', '.join(FAISS_TYPES)}")


def build_faiss(chunks: Sequence[Path], kind: str, dim: int, count: int):
    """Add the chunk embeddings (memory-mapped, one chunk at a time) to a new FAISS index."""
    index = _new_faiss(kind, dim, count)
    if not index.is_trained:
        # IVF-PQ (k-means) and SQ8 (per-dimension ranges) train on a sample; 100k is plenty.
        sample, have = [], 0
        for path in chunks:
            sample.append(np.load(path))
            have += len(sample[-1])
            if have >= 100_000:
                break
        train = np.concatenate(sample)
        if kind == "ivfpq" and len(train) < 256:  # 2^8 PQ centroids per sub-quantizer
            raise ValueError("IVF-PQ needs at least 256 passages to train; use flat or hnsw")
        index.train(train)
    for path in chunks:
        index.add(np.load(path, mmap_mode="r")[:].astype(np.float32, copy=False))
    return index


def copy_passages(passages: Path, dest: Path, chunk_size: int = 65536) -> None:
    """Stream id/title/text into ``dest`` batch by batch, so no full copy is held in memory."""
    with atomic_path(dest) as tmp:
        writer = None
        for batch in _iter_batches(passages, chunk_size):
            if writer is None:
                writer = pq.ParquetWriter(tmp, batch.schema, compression="zstd")
            writer.write_batch(batch)
        if writer is None:
            raise ValueError(f"{passages} holds no passages")
        writer.close()


def _ids_checksum(passages: Path) -> tuple[str, int]:
    digest, count = hashlib.sha256(), 0
    for batch in pq.ParquetFile(passages).iter_batches(batch_size=65536, columns=["id"]):
        for pid in batch.column("id").to_pylist():
            digest.update(pid.encode("utf-8") + b"\0")
            count += 1
    return digest.hexdigest(), count


class _PackedDocs:
    """Token ids of every document in one int32 array plus offsets.

    bm25s iterates its corpus a few times while indexing; this hands it one document at a time
    as a short Python list, so 1M passages cost ~4 bytes per token instead of a Python list of
    Python ints per document (measured peak RSS in bench/results/retrieval.json).
    """

    def __init__(self, flat: np.ndarray, offsets: np.ndarray) -> None:
        self.flat, self.offsets = flat, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> list[int]:
        return self.flat[self.offsets[i] : self.offsets[i + 1]].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        for i in range(len(self)):
            yield self[i]


def build_bm25(passages: Path, out_dir: Path, chunk_size: int = 65536) -> None:
    """Tokenise passages batch by batch into packed token ids and save a bm25s index.

    Tokenisation (lower-case, ``\\w\\w+`` words, English stopwords, no stemming) matches the
    ``bm25s.tokenize`` call that ``Retriever.bm25_ranks`` applies to queries.
    """
    import bm25s
    from bm25s.tokenization import Tokenized, Tokenizer

    tokenizer = Tokenizer(stopwords="en")
    parts, lengths = [], []
    for batch in _iter_batches(passages, chunk_size):
        ids = tokenizer.tokenize(_texts(batch), update_vocab=True, return_as="ids",
                                 show_progress=False)
        lengths.extend(len(doc) for doc in ids)
        parts.append(np.fromiter((t for doc in ids for t in doc), dtype=np.int32))
        del ids
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    del parts
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    model = bm25s.BM25()
    model.index(Tokenized(ids=_PackedDocs(flat, offsets), vocab=tokenizer.get_vocab_dict()),
                show_progress=False)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save(str(tmp))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)


def build_index(
    passages: str | Path,
    out_dir: str | Path,
    embedder: Embedder | str | None = "e5-nano",
    faiss_type: str = "flat",
    bm25: bool = True,
    chunk_size: int = 4096,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Build every requested index over a PASSAGES Parquet file into ``out_dir``; return the manifest.

    Re-running after a kill resumes embedding from the last finished chunk.
    """
    faiss = import_faiss()

    passages, out_dir = Path(passages), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(embedder, str):
        embedder = load_embedder(embedder)
    checksum, count = _ids_checksum(passages)
    manifest: dict = {"count": count, "ids_sha256": checksum, "bm25": bm25,
                      "embedder": None, "dim": None, "faiss_type": None}
    # Copy id/title/text so the index directory is self-contained for hit lookup.
    copy_passages(passages, out_dir / "passages.parquet")
    if bm25:
        build_bm25(passages, out_dir / "bm25")
    if embedder is not None:
        chunk_dir = out_dir / "chunks"
        _check_resume(chunk_dir, embedder.name, checksum, chunk_size)
        started = time.perf_counter()
        bar = None
        if progress is None:
            from tqdm.auto import tqdm

            bar = tqdm(total=count, desc=f"embed ({embedder.name})", unit="passage")
            progress = bar.update
        chunks = embed_chunks(passages, chunk_dir, embedder, chunk_size, progress)
        if bar is not None:
            bar.close()
        manifest["embed_seconds"] = time.perf_counter() - started
        index = build_faiss(chunks, faiss_type, embedder.dim, count)
        with atomic_path(out_dir / "dense.faiss") as tmp:
            faiss.write_index(index, str(tmp))
        shutil.rmtree(chunk_dir)
        manifest.update(embedder=embedder.name, dim=embedder.dim, faiss_type=faiss_type)
    write_json(manifest, out_dir / MANIFEST)
    return manifest


def _check_resume(chunk_dir: Path, embedder: str, checksum: str, chunk_size: int) -> None:
    """Keep finished chunks only if they were made by the same embedder over the same passages."""
    key = {"embedder": embedder, "ids_sha256": checksum, "chunk_size": chunk_size}
    marker = chunk_dir / "chunks.json"
    if marker.exists() and json.loads(marker.read_text()) != key:
        shutil.rmtree(chunk_dir)
    chunk_dir.mkdir(parents=True, exist_ok=True)
    write_json(key, marker)


def rrf(rankings: Sequence[Sequence[int]], k: int) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of several ranked document lists; top ``k`` (doc, score)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (RRF_K + rank + 1)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


@dataclass(frozen=True)
class BM25Postings:
    """bm25s's term-by-document score matrix (CSC: one sorted posting list per term).

    ``upper[t]`` is the highest score term ``t`` gives any document: the bound MaxScore pruning
    needs.
    """

    data: np.ndarray     # [nnz] float32 per-(doc, term) BM25 score
    indices: np.ndarray  # [nnz] int32 doc ids, sorted within each term
    indptr: np.ndarray   # [V+1] start of each term's postings
    upper: np.ndarray    # [V] max score per term
    num_docs: int

    @classmethod
    def from_bm25s(cls, model) -> BM25Postings:
        data, indices, indptr = (np.asarray(model.scores[key]) for key in ("data", "indices", "indptr"))
        upper = np.zeros(len(indptr) - 1, dtype=np.float32)
        nonempty = np.diff(indptr) > 0
        upper[nonempty] = np.maximum.reduceat(data, indptr[:-1][nonempty]) if data.size else 0
        num_docs = model.scores.get("num_docs") or (int(indices.max()) + 1 if indices.size else 0)
        return cls(data, indices, indptr, upper, int(num_docs))

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        start, stop = self.indptr[term], self.indptr[term + 1]
        return self.indices[start:stop], self.data[start:stop]


def bm25_top_k(index: BM25Postings, terms: Sequence[int], k: int,
               scratch: np.ndarray | None = None) -> list[tuple[int, float]]:
    """Exact BM25 top-``k`` of one query (term ids, no repeats) by MaxScore pruning.

    bm25s scores every document of the corpus per query and sorts the lot. Here terms go from
    the most to the least discriminative (highest score bound first) and are added into a dense
    accumulator (``scratch``: ``[num_docs]`` float32 zeros, reused across queries and left zeroed)
    only while an unseen document could still reach the top ``k`` (the remaining terms' bounds
    reach the current k-th best score). The remaining terms, usually the frequent ones with the
    longest lists, are looked up for the candidates only, by binary search. Cost is linear in the
    postings read: no sort of merged lists, no pass over the whole corpus. Scores are bm25s's.
    """
    terms = sorted(terms, key=lambda t: -index.upper[t])
    if not terms or k <= 0:
        return []
    acc = scratch if scratch is not None else np.zeros(index.num_docs, dtype=np.float32)
    rest = np.cumsum([index.upper[t] for t in terms][::-1])[::-1]  # bound of terms[i:]
    found: list[np.ndarray] = []  # each doc once, in the order first reached
    cand = np.zeros(0, dtype=np.int32)
    floor = 0.0  # a lower bound of the final k-th best score (partial scores only grow)
    try:
        i = 0
        while i < len(terms):
            if len(cand) >= k:
                floor = float(np.partition(acc[cand], -k)[-k])
                if rest[i] < floor:
                    break  # no document outside `cand` can reach the top k any more
            pdocs, pscores = index.postings(terms[i])
            found.append(pdocs[acc[pdocs] == 0])  # postings scores are > 0: 0 means unseen
            acc[pdocs] += pscores  # doc ids are unique within a posting list
            cand = np.concatenate(found) if len(found) > 1 else found[0]
            i += 1
        for term in terms[i:]:  # the rest only adds to documents already in the running
            pdocs, pscores = index.postings(term)
            if len(pdocs) == 0 or len(cand) == 0:
                continue
            pos = np.minimum(np.searchsorted(pdocs, cand), len(pdocs) - 1)
            hit = pdocs[pos] == cand
            acc[cand[hit]] += pscores[pos[hit]]
        scores = acc[cand]
    finally:
        acc[cand] = 0  # hand the scratch back zeroed
    above = np.flatnonzero(scores >= floor)  # a cheap pass first: the top k are all above it
    docs, scores = cand[above], scores[above]
    top = np.argpartition(-scores, k - 1)[:k] if len(scores) > k else np.arange(len(scores))
    order = top[np.lexsort((docs[top], -scores[top]))]
    return [(int(docs[j]), float(scores[j])) for j in order if scores[j] > 0]


class Retriever:
    """Batched search over a built index directory, by BM25, dense vectors or both (RRF)."""

    def __init__(
        self,
        index_dir: str | Path,
        mode: str = "dense",
        embedder: Embedder | str | None = None,
        ef_search: int | None = None,
        bm25_threads: int | None = None,
        device: str = "auto",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        # what a worker process rebuilds it from (__reduce__): an index is read, never pickled
        self._init_args = (str(index_dir), mode, embedder, ef_search, bm25_threads, device)
        self.dir = Path(index_dir)
        manifest_path = self.dir / MANIFEST
        if not manifest_path.exists():
            raise FileNotFoundError(f"{self.dir} holds no finished index (no {MANIFEST})")
        self.manifest = json.loads(manifest_path.read_text())
        self.mode = mode
        # Kept as Arrow columns (not Python strings): a fraction of the memory for 1M passages.
        self.passages = pq.read_table(self.dir / "passages.parquet")
        self.bm25 = self._load_bm25() if mode in ("bm25", "hybrid") else None
        self._postings: BM25Postings | None = None
        self._scratch = threading.local()
        # batches of 32+ queries are split over this many threads (default: one per CPU)
        self.bm25_threads = bm25_threads or os.cpu_count() or 1
        self._pool = None
        self.embedder = None
        self.faiss = None
        if mode in ("dense", "hybrid"):
            self.embedder, self.faiss = self._load_dense(embedder, ef_search, device)

    def _load_bm25(self):
        import bm25s

        if not self.manifest.get("bm25"):
            raise ValueError(f"{self.dir} was built without a BM25 index")
        return bm25s.BM25.load(str(self.dir / "bm25"))

    def _load_dense(self, embedder, ef_search, device):
        faiss = import_faiss()

        built_with = self.manifest.get("embedder")
        if built_with is None:
            raise ValueError(f"{self.dir} was built without a dense index")
        if embedder is None:
            embedder = built_with
        name = embedder if isinstance(embedder, str) else embedder.name
        if name != built_with:
            raise IndexMismatchError(
                f"index {self.dir} was built with embedder {built_with!r} "
                f"(dim {self.manifest['dim']}); it cannot be searched with {name!r}"
            )
        if isinstance(embedder, str):
            embedder = load_embedder(embedder, device=device)
        if embedder.dim != self.manifest["dim"]:
            raise IndexMismatchError(
                f"embedder {name!r} gives dim {embedder.dim}, index has dim {self.manifest['dim']}"
            )
        index = faiss.read_index(str(self.dir / "dense.faiss"))
        if ef_search is not None and hnsw_of(index) is not None:
            hnsw_of(index).efSearch = ef_search
        return embedder, index

    def __len__(self) -> int:
        return self.passages.num_rows

    def __reduce__(self):
        """Pickled as its constructor's arguments (``factrl.eval.workers`` sends retrievers to worker
        processes, which load the index anew); an embedder object cannot go, only an embedder name."""
        if not (self._init_args[2] is None or isinstance(self._init_args[2], str)):
            raise TypeError(f"a Retriever of {self.dir} built with an embedder object cannot be pickled; "
                            "build it with the embedder's name")
        return (type(self), self._init_args)

    def bm25_ranks(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """Top-``k`` (doc, score) per query by BM25; zero-score docs (no shared term) dropped."""
        import bm25s

        k = min(k, len(self))
        tokens = bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
        vocab = self.bm25.vocab_dict
        postings = self._bm25_postings
        term_ids = [[vocab[t] for t in set(row) if t in vocab] for row in tokens]

        def run(chunk: list[list[int]]) -> list[list[tuple[int, float]]]:
            scratch = getattr(self._scratch, "acc", None)  # one accumulator per thread, reused
            if scratch is None or len(scratch) < len(self):
                scratch = self._scratch.acc = np.zeros(len(self), dtype=np.float32)
            return [bm25_top_k(postings, terms, k, scratch) for terms in chunk]

        workers = min(self.bm25_threads, max(1, len(term_ids) // 32))
        if workers <= 1:
            return run(term_ids)
        # numpy's partition / searchsorted / fancy indexing release the GIL: queries run in parallel
        chunks = [term_ids[j::workers] for j in range(workers)]
        parts = list(self._bm25_pool().map(run, chunks))
        out: list = [None] * len(term_ids)
        for j, part in enumerate(parts):
            out[j::workers] = part
        return out

    def _bm25_pool(self):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.bm25_threads, thread_name_prefix="bm25")
        return self._pool

    @property
    def _bm25_postings(self) -> BM25Postings:
        if self._postings is None:
            self._postings = BM25Postings.from_bm25s(self.bm25)
        return self._postings

    def dense_ranks(self, queries: Sequence[str], k: int, vectors: np.ndarray | None = None):
        """Top-``k`` (doc, inner product) per query by the dense index."""
        if vectors is None:
            vectors = self.embedder.encode_queries(list(queries))
        scores, docs = self.faiss.search(vectors, min(k, len(self)))
        return [
            [(int(d), float(s)) for d, s in zip(drow, srow) if d >= 0]
            for drow, srow in zip(docs, scores)
        ]

    def ranks(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """Top-``k`` (doc index, score) per query in this retriever's mode."""
        if not queries:
            return []
        if self.mode == "bm25":
            return self.bm25_ranks(queries, k)
        if self.mode == "dense":
            return self.dense_ranks(queries, k)
        # Fuse deeper lists than k so a passage ranked moderately by both can rise to the top.
        depth = max(4 * k, 20)
        sparse, dense = self.bm25_ranks(queries, depth), self.dense_ranks(queries, depth)
        return [
            rrf([[d for d, _ in s], [d for d, _ in v]], k) for s, v in zip(sparse, dense)
        ]

    def search(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        """Top-``k`` hits for every query, best first."""
        rows = self.ranks(list(queries), k)
        flat = [d for row in rows for d, _ in row]
        picked = self.passages.take(pa.array(flat, type=pa.int64())).to_pylist()
        hits, i = [], 0
        for row in rows:
            hits.append([
                Hit(p["id"], p["title"] or "", p["text"], s)
                for p, (_, s) in zip(picked[i : i + len(row)], row)
            ])
            i += len(row)
        return hits
