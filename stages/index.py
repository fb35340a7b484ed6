"""Stage `index`: BM25 and dense FAISS indexes over the prepared passages.

Input: data/passages.parquet. Output: index/ (manifest.json, bm25/, dense.faiss, passages.parquet).
A killed run resumes embedding from its last finished chunk (index/chunks/ is kept by DVC's
`persist` until the index is complete).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tqdm import tqdm

from factrl.config import load_section
from factrl.retrieval.embed import load_embedder
from factrl.retrieval.index import build_index
from factrl.retrieval.params import IndexParams


def main(params_file: str = "params.yaml", passages: Path = Path("data/passages.parquet"),
         out: Path = Path("index")) -> dict:
    params: IndexParams = load_section(IndexParams, params_file)
    embedder = load_embedder(params.embedder, device=params.device, key="index.device")
    with tqdm(desc="embedding passages", unit="passage") as bar:
        manifest = build_index(passages, out, embedder=embedder, faiss_type=params.faiss_type,
                               bm25=params.bm25, chunk_size=params.chunk_size, progress=bar.update)
    print(f"index: {manifest['count']} passages, embedder={manifest['embedder']}, faiss={manifest['faiss_type']}")
    return manifest


if __name__ == "__main__":
    main(*sys.argv[1:2])
