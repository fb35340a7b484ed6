"""Warm-start fine-tuning speed on SmolLM2-135M -> bench/results/warmup.json.

Builds the demo world of params.yaml (its ``prepare.world``) with a BM25 index in a temporary
directory, the reference trajectories of both agents from the train claims' gold chains
(``factrl.data.reference.world_references``), and times the product path
(``factrl.recipes.warmup.agent_examples`` -> ``factrl.rl.sft.train_sft``, transformers' Trainer) for
``--steps`` optimizer steps of ``--batch`` sequences per agent, at the pipeline's precision
(``auto``: bf16 only where the CPU computes it natively). The first step (allocator and thread
warm-up) is excluded; tokens are non-padding input tokens (prompt + response), "trained" tokens
those with a label. Also reported: the tokens of one example per agent and prompt style (the
short style is what warmed agents keep), and what one epoch over all train references would take
at the measured speed, so the demo's warm-start budget can be sized.

Usage: nice -n 10 python -m bench.warmup [--steps 4] [--batch 8] [--full]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from transformers import TrainerCallback

from bench._measured import Measurement
from factrl.agents.tools import RetrieverTool
from factrl.config import load_section
from factrl.data.params import PrepareParams
from factrl.data.reference import world_references
from factrl.data.splits import stratified_split
from factrl.data.world import write_world
from factrl.data.world_claims import generate_claims
from factrl.llm.models import load_model_and_tokenizer
from factrl.recipes.warmup import AGENTS, agent_examples
from factrl.recipes.warmup_params import WarmupParams
from factrl.retrieval.index import Retriever, build_index
from factrl.rl.params import SFTParams
from factrl.rl.sft import IGNORE_INDEX, train_sft

RESULTS = Path(__file__).parent / "results" / "warmup.json"


class StepClock(TrainerCallback):
    """Wall time, this process's CPU time and non-padding tokens at the end of every optimizer step."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float, int]] = []

    def _mark(self, state) -> None:
        self.marks.append((time.perf_counter(), time.process_time(), int(state.num_input_tokens_seen)))

    def on_step_begin(self, args, state, control, **kwargs):
        if not self.marks:
            self._mark(state)

    def on_step_end(self, args, state, control, **kwargs):
        self._mark(state)


def token_stats(examples: list[dict]) -> dict:
    lengths = [len(e["input_ids"]) for e in examples]
    trained = [sum(x != IGNORE_INDEX for x in e["labels"]) for e in examples]
    return {"examples": len(examples), "mean_tokens": statistics.mean(lengths), "mean_trained_tokens": statistics.mean(trained),
            "total_tokens": sum(lengths), "max_tokens": max(lengths)}


def time_sft(examples: list[dict], batch: int, steps: int, precision: str, seed: int) -> dict:
    model, tok = load_model_and_tokenizer("smollm2-135m")
    cfg = SFTParams(max_steps=steps, batch_size=batch, lr=5e-5, checkpoint_every=10_000, warmup_ratio=0.0)
    clock = StepClock()
    with tempfile.TemporaryDirectory() as out:
        result = train_sft(model, tok, examples, cfg, out, seed=seed, precision=precision, callbacks=[clock])
    (t1, c1, n1), (t_end, c_end, n_end) = clock.marks[1], clock.marks[-1]  # from the end of step 1
    step_s = [b[0] - a[0] for a, b in zip(clock.marks[1:], clock.marks[2:])]
    trained_per_token = sum(sum(x != IGNORE_INDEX for x in e["labels"]) for e in examples) / sum(
        len(e["input_ids"]) for e in examples)
    tps = (n_end - n1) / (t_end - t1)
    return {"batch": batch, "steps_timed": len(step_s), "median_step_s": statistics.median(step_s),
            "tokens_per_s": tps, "trained_tokens_per_s": tps * trained_per_token,
            "sequences_per_s": batch * len(step_s) / (t_end - t1), "precision": result.precision,
            # on a shared machine the wall-clock rate depends on the load; the rate per CPU-second of
            # this process does not (much), and times the thread count bounds the idle-machine rate
            "tokens_per_cpu_s": (n_end - n1) / (c_end - c1), "cpu_share": (c_end - c1) / (t_end - t1),
            "losses": [round(x["loss"], 4) for x in result.losses]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per agent (the first is not timed)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--full", action="store_true", help="also time the reasoning agent under the full prompt")
    parser.add_argument("--precision", default="auto")
    args = parser.parse_args()
    measured = Measurement(args.precision)
    world = load_section(PrepareParams, "params.yaml").world
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        write_world(world, d / "p.parquet", d / "c.parquet")
        build_index(d / "p.parquet", d / "index", embedder=None)
        prepare = load_section(PrepareParams, "params.yaml")
        train = stratified_split(generate_claims(world), prepare.split_fractions, prepare.seed)["train"].to_pylist()
        kept, rejected = world_references(train, RetrieverTool(Retriever(d / "index", mode="bm25"), k=3))
    _, tok = load_model_and_tokenizer("smollm2-135m")
    out: dict = {"train_claims": len(train), "references": {a: sum(r["agent"] == a for r in kept) for a in AGENTS},
                 "rejected": len(rejected), "examples": {}, "sft": {}}
    examples = {}
    for style in ("short", "full"):
        params = WarmupParams(enabled=True, prompt=style)
        for agent in AGENTS:
            exs, _ = agent_examples(kept, agent, tok, params)
            out["examples"][f"{agent}/{style}"] = token_stats(exs)
            examples[(agent, style)] = exs
    timed = [(a, "short") for a in AGENTS] + ([("reasoning", "full")] if args.full else [])
    for agent, style in timed:
        print(f"timing {agent} ({style} prompt): {args.steps} steps of {args.batch}", flush=True)
        res = time_sft(examples[(agent, style)], args.batch, args.steps, args.precision, seed=0)
        epoch_tokens = out["examples"][f"{agent}/{style}"]["total_tokens"]
        out["sft"][f"{agent}/{style}"] = res | {"epoch_minutes_at_this_speed": epoch_tokens / res["tokens_per_s"] / 60}
        print(f"  {res['tokens_per_s']:.1f} tokens/s, {res['median_step_s']:.1f} s/step", flush=True)
    out["niceness"] = os.nice(0)
    out["settings"] = {"steps": args.steps, "batch": args.batch, "world": asdict(world)}
    measured.write(out, RESULTS)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
