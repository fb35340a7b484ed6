"""Benchmark: HARIS multi-turn rollouts vs plain batched generation, and untrained format validity.

``multiturn_vs_generate`` = generated tokens/s of HARIS rollouts (reasoning + search agents, the
tool calls, retrieval and re-encoding of the context between turns all inside the timer) over the
generated tokens/s of one plain batched ``complete_tokens`` call on the same 16 reasoning prompts
that generates exactly as many tokens in total (``ignore_eos``: every row runs to the same
per-row budget, as vLLM's benchmarks do), measured in the same run with the same engine.
``format_valid_rate``: the share of untrained (SmolLM2-135M) trajectories whose tags parse as valid.

    python -m bench.rollout [--claims 16] [--out bench/results/rollout.json]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

from bench._measured import Measurement
from bench._world import demo_world
from factrl.agents.haris import Haris, default_reasoning_params, default_search_params, reasoning_messages
from factrl.data.params import WorldParams
from factrl.llm.base import SamplingParams
from factrl.llm.local import LocalLLM
from factrl.retrieval.index import Retriever


def demo_setup(tmp: Path, num_claims: int) -> tuple[list[str], Retriever]:
    table, index = demo_world(tmp, WorldParams(seed=13, num_passages=2000, num_claims=max(num_claims, 12),
                                               hops=(2, 3)))
    return table.column("claim").to_pylist()[:num_claims], Retriever(index, mode="bm25")


def bench_haris(llm, retriever, max_new_tokens: int) -> Haris:
    """HARIS as this benchmark runs it: greedy, at most two tool calls per agent."""
    return Haris(llm, retriever,
                 reason_params=default_reasoning_params(max_turns=2, max_new_tokens=max_new_tokens),
                 search_params=default_search_params(max_turns=2, max_new_tokens=max_new_tokens))


def generated_tokens(results) -> tuple[int, int]:
    """(reasoning, search) tokens the policy generated (loss mask 1) across all trajectories."""
    reason = sum(sum(r.trajectory.loss_mask) for r in results)
    search = sum(sum(s.trajectory.loss_mask) for r in results for s in r.searches if s is not None)
    return reason, search


def critical_path(result) -> int:
    """Tokens one claim generates strictly one after another: its reasoning turns and, for each
    question, the search agent's turns (the reasoning agent waits for the report). No engine can
    finish the claim in fewer sequential decode steps."""
    return sum(result.trajectory.loss_mask) + sum(sum(s.trajectory.loss_mask) for s in result.searches if s is not None)


def engine_delta(llm, before: dict) -> dict:
    steps = llm.stats["decode_steps"] - before["decode_steps"]
    return {"decode_steps": steps,
            "mean_batch": round((llm.stats["decoded_rows"] - before["decoded_rows"]) / max(steps, 1), 2),
            "prefilled_tokens": llm.stats["prefilled_tokens"] - before["prefilled_tokens"]}


def measure(precision: str, claims: list[str], retriever, args) -> dict:
    """Interleaved repeats of HARIS rollouts and plain generation on one engine of ``precision``."""
    llm = LocalLLM("smollm2-135m", max_batch=32, precision=precision)
    haris = bench_haris(llm, retriever, args.max_new_tokens)
    haris.verify(claims[:2])  # warm-up (allocator, tokenizer caches); not timed
    prompts = [llm.encode_chat(reasoning_messages(c)) for c in claims]
    runs = []
    for _ in range(args.repeats):
        # Interleaved, each from a cold prefix cache, so drifting load hits both sides alike.
        llm.clear_prefix_cache()
        before = dict(llm.stats)
        t0 = time.perf_counter()
        results = haris.verify(claims)
        multi_s = time.perf_counter() - t0
        multi_engine = engine_delta(llm, before)
        reason_tok, search_tok = generated_tokens(results)
        total = reason_tok + search_tok
        per_row = max(1, math.ceil(total / len(claims)))
        llm.clear_prefix_cache()
        before = dict(llm.stats)
        t0 = time.perf_counter()
        plain = llm.complete_tokens(prompts, SamplingParams(max_tokens=per_row, temperature=0.0, ignore_eos=True))
        plain_s = time.perf_counter() - t0
        plain_tok = sum(c[0].completion_tokens for c in plain)
        runs.append({"multiturn_s": multi_s, "multiturn_tokens": total, "plain_s": plain_s,
                     "plain_tokens": plain_tok, "ratio": (total / multi_s) / (plain_tok / plain_s),
                     "multiturn_engine": multi_engine, "plain_engine": engine_delta(llm, before)})
    multi_s = statistics.median(r["multiturn_s"] for r in runs)
    plain_s = statistics.median(r["plain_s"] for r in runs)
    searches = [s for r in results for s in r.searches if s is not None]
    return {
        "results": results,
        "multiturn": {"seconds": round(multi_s, 2), "generated_tokens": total, "reasoning_tokens": reason_tok,
                      "search_tokens": search_tok, "tokens_per_s": round(total / multi_s, 2),
                      "tool_calls_reasoning": sum(r.trajectory.num_tool_calls for r in results),
                      "tool_calls_search": sum(s.trajectory.num_tool_calls for s in searches),
                      "search_rollouts": len(searches),
                      "critical_path_tokens": max(critical_path(r) for r in results),
                      "engine": runs[-1]["multiturn_engine"]},
        "plain_generate": {"seconds": round(plain_s, 2), "generated_tokens": plain_tok,
                           "max_tokens_per_row": per_row, "tokens_per_s": round(plain_tok / plain_s, 2),
                           "engine": runs[-1]["plain_engine"]},
        "multiturn_vs_generate": round(statistics.median(r["ratio"] for r in runs), 3),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--claims", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precisions", default="bf16,fp32",
                    help="engine weights, comma-separated; the first is the headline figure (bf16 is what "
                         "training rollouts use on a CPU with native bf16: train.*.precision in params.yaml)")
    ap.add_argument("--out", default="bench/results/rollout.json")
    args = ap.parse_args(argv)

    measured = Measurement()  # engine precisions measured: see --precisions
    with tempfile.TemporaryDirectory() as d:
        claims, retriever = demo_setup(Path(d), args.claims)
        by_precision = {p: measure(p, claims, retriever, args) for p in args.precisions.split(",")}
    headline = next(iter(by_precision))
    results = by_precision[headline].pop("results")
    for m in by_precision.values():
        m.pop("results", None)
    searches = [s for r in results for s in r.searches if s is not None]
    reasoning_valid = [r.parse.format_valid for r in results]
    search_valid = [s.parse.format_valid for s in searches]
    errors: dict[str, int] = {}
    for r in results:
        if r.parse.error:
            errors[r.parse.error] = errors.get(r.parse.error, 0) + 1
    out = {
        "model": f"smollm2-135m (untrained, greedy), engine weights {headline}",
        "claims": len(claims),
        **{k: v for k, v in by_precision[headline].items()},
        "by_precision": {p: {"multiturn_vs_generate": m["multiturn_vs_generate"],
                             "multiturn_tokens_per_s": m["multiturn"]["tokens_per_s"],
                             "plain_tokens_per_s": m["plain_generate"]["tokens_per_s"]}
                         for p, m in by_precision.items()},
        "bar": 0.75,
        "format_valid_rate": {
            "reasoning": round(statistics.fmean(reasoning_valid), 3) if reasoning_valid else None,
            "search": round(statistics.fmean(search_valid), 3) if search_valid else None,
            "reasoning_n": len(reasoning_valid), "search_n": len(search_valid),
        },
        "reasoning_format_errors": errors,
        "verdicts": {str(v): sum(r.verdict == v for r in results) for v in ("SUPPORTS", "REFUTES", None)},
    }
    measured.write(out, args.out)
    print({k: v for k, v in out.items() if k != "runs"})


if __name__ == "__main__":
    main()
