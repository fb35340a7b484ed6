"""How many rows should the local engine decode together? -> bench/results/engine_batch.json.

``LocalLLM(max_batch=...)`` bounds the rows one decode step runs (and so the key/value slots the
engine keeps); every stage builds its engines with the default, 32. This benchmark runs the
evaluation's workload, greedy HARIS rollouts of demo-world claims (reasoning turns, and a search
agent rollout per question, on one engine), once per ``--max-batch`` value, interleaved over
``--repeats`` rounds so drift of the machine's speed hits every value alike, and reports the median
generated tokens/s of each and its ratio to the default's (``vs_default``). ``same_outputs`` says
whether every value produced the default's trajectories token for token (fp32 does; bf16 rounding
may depend on the batch's shape). Untrained SmolLM2-135M, ``--precision`` (auto: bf16 on CPUs with
native bf16).

Usage: python -m bench.engine_batch [--claims 64] [--max-batch 16 32 64] [--repeats 2] [--precision auto]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench._measured import Measurement
from bench.rollout import bench_haris, demo_setup, engine_delta, generated_tokens
from factrl.llm.local import LocalLLM

RESULTS = Path(__file__).parent / "results" / "engine_batch.json"
DEFAULT_MAX_BATCH = 32  # LocalLLM's default, which every stage uses


def rollout_tokens(results) -> list[list[int]]:
    """Every claim's reasoning trajectory ids: what ``same_outputs`` compares."""
    return [list(r.trajectory.response_ids) for r in results]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--claims", type=int, default=64)
    ap.add_argument("--max-batch", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    measured = Measurement(args.precision)
    runs: dict[int, list[dict]] = {b: [] for b in args.max_batch}
    outputs: dict[int, list[list[int]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-engine-batch-") as tmp:
        claims, retriever = demo_setup(Path(tmp), args.claims)
        llm = LocalLLM(precision=args.precision)
        bench_haris(llm, retriever, args.max_new_tokens).verify(claims[:2])  # warm-up: first-call costs
        for repeat in range(args.repeats):
            for max_batch in args.max_batch:
                llm.max_batch = max_batch
                llm.clear_prefix_cache()  # each run prefills its prompts itself
                before = dict(llm.stats)
                start = time.perf_counter()
                results = bench_haris(llm, retriever, args.max_new_tokens).verify(claims)
                seconds = time.perf_counter() - start
                reason, search = generated_tokens(results)
                runs[max_batch].append({"seconds": round(seconds, 2), "tokens": reason + search,
                                        "tokens_per_s": round((reason + search) / seconds, 2),
                                        "engine": engine_delta(llm, before)})
                outputs.setdefault(max_batch, rollout_tokens(results))
                print(f"repeat {repeat}, max_batch {max_batch}: {(reason + search) / seconds:.1f} tokens/s "
                      f"({seconds:.1f} s)", flush=True)
    tps = {b: statistics.median(r["tokens_per_s"] for r in rs) for b, rs in runs.items()}
    base = tps.get(DEFAULT_MAX_BATCH)
    result = {
        "workload": f"greedy HARIS rollouts of {args.claims} demo claims (max 2 tool calls per agent, "
                    f"{args.max_new_tokens} new tokens per turn), untrained smollm2-135m, engine {llm.precision}",
        "claims": args.claims, "repeats": args.repeats, "default_max_batch": DEFAULT_MAX_BATCH,
        "tokens_per_s": {str(b): v for b, v in tps.items()},
        "vs_default": {str(b): round(v / base, 3) for b, v in tps.items()} if base else None,
        "same_outputs": {str(b): outputs[b] == outputs.get(DEFAULT_MAX_BATCH) for b in outputs},
        "runs": {str(b): rs for b, rs in runs.items()},
    }
    measured.write(result, args.out)
    print(f"wrote {args.out}: {result['vs_default']}")


if __name__ == "__main__":
    main()
