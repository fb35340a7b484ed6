"""Benchmark: the claim decomposers on labelled multi-claim texts from the demo world.

The texts (``factrl.verify.texts.labelled_texts``: 2-4 demo-world claims and 2 filler sentences
each, fillers being opinions, hedges and questions, a few of them written without the markers the
``sentences`` rules look for) are split by both backends of ``factrl.verify.decompose``:

* ``sentences``: pysbd and the check-worthiness rules, in process;
* ``llm``: SmolLM2-135M-Instruct behind a real ``factrl serve-llm`` (OpenAI-compatible HTTP,
  greedy), prompted as SAFE does. A 135M model writes poor JSON and poor claims: its figures say
  what the plumbing delivers with the default model, not what the backend can do with a capable one.

Per backend: recall (gold claims recovered / gold), precision (recovered / found), extra claims,
exact-offset matches among the recovered, texts whose reply could not be parsed, and the median
seconds per text over ``--runs`` runs. Writes ``bench/results/decompose.json``.

    python -m bench.decompose [--texts 30] [--runs 3] [--llm-texts 10] [--llm-model smollm2-135m] [--no-llm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench._measured import Measurement

RESULTS = Path(__file__).parent / "results" / "decompose.json"


def run_backend(texts, backend: str, runs: int, **options) -> dict:
    """Score ``backend`` on ``texts``; timing is the median over ``runs`` passes (scores from the first:
    every backend here is deterministic)."""
    from factrl.verify.decompose import DecomposeError, decompose
    from factrl.verify.texts import score_decomposition

    totals = {"gold": 0, "found": 0, "recovered": 0, "extra": 0, "exact_offsets": 0}
    failed, seconds, examples = 0, [], []
    for r in range(runs):
        t0 = time.perf_counter()
        for i, t in enumerate(texts):
            try:
                found = decompose(t.text, backend, **options)
            except DecomposeError as err:
                found = []
                if r == 0:
                    failed += 1
                    if len(examples) < 2:
                        examples.append({"text": t.text, "error": str(err)[:300]})
            if r:
                continue
            assert all(t.text[c.start:c.end] for c in found)
            for key, value in score_decomposition(t.gold, found).items():
                totals[key] += value
            if i < 2:
                examples.append({"text": t.text, "claims": [[c.text, c.start, c.end] for c in found]})
        seconds.append(time.perf_counter() - t0)
    found, gold = totals["found"], totals["gold"]
    return {**totals, "recall": totals["recovered"] / gold if gold else None,
            "precision": totals["recovered"] / found if found else None,
            "exact_offset_rate": totals["exact_offsets"] / totals["recovered"] if totals["recovered"] else None,
            "unparseable_replies": failed, "seconds_per_text_median": statistics.median(seconds) / len(texts),
            "runs": runs, "examples": examples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--llm-runs", type=int, default=1, help="passes of the llm backend (slow on CPU)")
    ap.add_argument("--llm-model", default="smollm2-135m")
    ap.add_argument("--llm-texts", type=int, default=10, help="the first N texts for the llm backend (slow on CPU)")
    ap.add_argument("--llm-max-tokens", type=int, default=256)
    ap.add_argument("--no-llm", action="store_true")
    args = ap.parse_args()
    measured = Measurement("fp32")
    from factrl.verify.texts import labelled_texts

    texts = labelled_texts(args.texts, seed=args.seed)
    result = {"texts": len(texts), "gold_claims": sum(len(t.gold) for t in texts), "seed": args.seed,
              "recovered_if": "a found claim overlapping the gold claim's span shares >= 60% of its words",
              "backends": {"sentences": run_backend(texts, "sentences", args.runs)}}
    if not args.no_llm:
        from factrl.llm.serve import spawn_server

        with spawn_server(args.llm_model, precision="fp32", device="cpu") as url:
            spec = f"openai:{args.llm_model}@{url}"
            subset = texts[: args.llm_texts]
            result["backends"]["llm"] = run_backend(subset, "llm", args.llm_runs, model=spec,
                                                    max_tokens=args.llm_max_tokens) | {
                "model": args.llm_model, "server": "factrl serve-llm (OpenAI-compatible), greedy",
                "texts": len(subset), "max_tokens": args.llm_max_tokens}
    print(json.dumps(measured.write(result, RESULTS), indent=2))


if __name__ == "__main__":
    main()
