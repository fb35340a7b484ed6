"""What the page offers a newcomer to try: claims drawn from the corpus being served, and one it lacks.

An example is only useful if the served corpus can answer it: the page's placeholder used to be a claim
about "Orlen Studios", which no demo world names, and it came back REFUTES citing another company. Here
the examples are first sentences of the index's own passages (each one true by construction of the
corpus, so the verifier should answer SUPPORTS with a citation), spread over the passage file, plus one
claim no demo passage names, to show what "not enough evidence in this corpus" looks like.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from factrl.agents.citations import sentence_spans

OUTSIDE_EXAMPLE = "Paris is the capital of France."


def corpus_examples(index_dir: str | Path, n: int = 3) -> dict:
    """``{"corpus": {"index", "passages"}, "examples": [{"claim", "kind"}, ...]}``: ``n`` first sentences of
    passages spread evenly over ``index_dir``/passages.parquet (kind ``in corpus``), then
    :data:`OUTSIDE_EXAMPLE` (kind ``not in this corpus``)."""
    table = pq.read_table(Path(index_dir) / "passages.parquet", columns=["text"])
    texts = table.column("text").to_pylist()
    examples = []
    for k in range(n):
        if not texts:
            break
        text = texts[(2 * k + 1) * len(texts) // (2 * n)]  # the middle of each n-th of the file
        spans = sentence_spans(text)
        if spans:
            start, end = spans[0]
            examples.append({"claim": text[start:end], "kind": "in corpus"})
    examples.append({"claim": OUTSIDE_EXAMPLE, "kind": "not in this corpus"})
    return {"corpus": {"index": str(index_dir), "passages": len(texts)}, "examples": examples}
