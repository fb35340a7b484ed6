"""The demo world and its BM25 index, as the benchmarks set them up: one function, so every
benchmark that needs a world builds it the same way (the world's generator, stage ``index``'s own
``build_index``, no embedder: BM25 is what these benchmarks search). The file starts with ``_`` so
`make bench` does not run it as a benchmark."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from factrl.data.params import WorldParams


def demo_world(root: Path, world: WorldParams) -> tuple[pa.Table, Path]:
    """Write ``world``'s passages (``root/p.parquet``) and claims (``root/c.parquet``) and build their
    BM25 index in ``root/index``; the claims and the index directory."""
    from factrl.data.world import write_world
    from factrl.retrieval.index import build_index

    root.mkdir(parents=True, exist_ok=True)
    write_world(world, root / "p.parquet", root / "c.parquet")
    build_index(root / "p.parquet", root / "index", embedder=None)
    return pq.read_table(root / "c.parquet"), root / "index"
