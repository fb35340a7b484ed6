"""glibc's allocator tuned for tensor work, against its defaults -> bench/results/allocator.json.

``factrl.hardware.tune_allocator`` (applied wherever a model loads) keeps freed tensor memory in the
process: glibc by default ``mmap``s every allocation over 32 MiB and unmaps it when freed, so each
forward pass faults in and zeroes its large activations again. This benchmark runs the same two
workloads in fresh processes with ``FACTRL_MALLOC_TUNING=1`` (factrl's setting) and ``=0`` (glibc's
defaults), interleaved, ``--repeats`` times each:

* ``sft``: the warm start's trainer (``factrl.rl.sft.train_sft``, transformers' Trainer, the
  pipeline's precision) on SmolLM2-135M, ``--steps`` optimizer steps of ``--batch`` examples shaped
  like the reasoning agent's references (316 tokens, the last 141 trained); the median step after
  the first;
* ``decode``: the rollout engine (``factrl.llm.local.LocalLLM``), 32 chat prompts decoded greedily
  for 64 tokens in one batch; tokens per second.

Each run reports its minor page faults and peak resident memory. Quoted: medians over repeats and
the tuned / default ratios (speed-up of the step and of decoding, and the memory cost).

Usage: python -m bench.allocator [--repeats 3] [--steps 6] [--batch 4]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "allocator.json"
PROMPT_TOKENS, TRAINED_TOKENS = 316, 141  # a reasoning reference with the short prompt (bench/warmup.py)


def _usage() -> dict:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return {"minor_faults": use.ru_minflt, "peak_rss_mib": use.ru_maxrss / 1024}


def work_sft(steps: int, batch: int) -> dict:
    import torch
    from transformers import TrainerCallback

    from factrl.llm.models import load_model_and_tokenizer
    from factrl.rl.params import SFTParams
    from factrl.rl.sft import IGNORE_INDEX, train_sft

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.marks.append(time.perf_counter())

    model, tok = load_model_and_tokenizer("smollm2-135m")
    gen = torch.Generator().manual_seed(0)
    examples = []
    for _ in range(batch * steps):
        ids = torch.randint(100, 40_000, (PROMPT_TOKENS,), generator=gen).tolist()
        cut = PROMPT_TOKENS - TRAINED_TOKENS
        examples.append({"input_ids": ids, "labels": [IGNORE_INDEX] * cut + ids[cut:]})
    clock = Clock()
    cfg = SFTParams(max_steps=steps, batch_size=batch, lr=1e-5, checkpoint_every=10_000, warmup_ratio=0.0)
    with tempfile.TemporaryDirectory() as out:
        result = train_sft(model, tok, examples, cfg, out, seed=0, callbacks=[clock])
    step_s = [b - a for a, b in zip(clock.marks, clock.marks[1:])]  # from the end of step 1
    return {"median_step_s": statistics.median(step_s), "step_s": step_s, "precision": result.precision}


def work_decode(rows: int, tokens: int) -> dict:
    from factrl.llm.base import SamplingParams
    from factrl.llm.local import LocalLLM

    llm = LocalLLM("smollm2-135m")
    prompts = [llm.tokenizer.apply_chat_template(
        [{"role": "user", "content": f"Tell a long story about the number {i} and a cat."}],
        add_generation_prompt=True, tokenize=True, return_dict=False) for i in range(rows)]
    llm.complete_tokens(prompts[:4], SamplingParams(max_tokens=8, temperature=0.0))  # allocator and threads warm
    start = time.perf_counter()
    out = llm.complete_tokens(prompts, SamplingParams(max_tokens=tokens, temperature=0.0))
    seconds = time.perf_counter() - start
    generated = sum(len(c[0].token_ids) for c in out)
    return {"tokens": generated, "seconds": seconds, "tokens_per_s": generated / seconds}


def worker(kind: str, args: argparse.Namespace) -> None:
    from factrl.hardware import tune_allocator

    result = work_sft(args.steps, args.batch) if kind == "sft" else work_decode(32, 64)
    print(json.dumps(result | _usage() | {"malloc_tuned": tune_allocator()}))


def run(kind: str, tuned: bool, args: argparse.Namespace) -> dict:
    env = {**os.environ, "FACTRL_MALLOC_TUNING": "1" if tuned else "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "bench")])}
    cmd = [sys.executable, __file__, "--worker", kind, "--steps", str(args.steps), "--batch", str(args.batch)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["malloc_tuned"] is not tuned:
        raise SystemExit(f"{kind}: asked for tuned={tuned}, the worker ran with tuned={result['malloc_tuned']}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per sft run (the first is not timed)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--worker", choices=["sft", "decode"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args)
    from bench._measured import Measurement

    measured = Measurement()
    runs: dict = {kind: {"tuned": [], "default": []} for kind in ("sft", "decode")}
    for i in range(args.repeats):  # interleaved, so a drift in the machine's speed hits both alike
        for kind in runs:
            for tuned in (True, False):
                res = run(kind, tuned, args)
                runs[kind]["tuned" if tuned else "default"].append(res)
                print(f"repeat {i} {kind} {'tuned' if tuned else 'default'}: "
                      f"{res.get('median_step_s', res.get('tokens_per_s')):.3f}, {res['minor_faults']} faults, "
                      f"{res['peak_rss_mib']:.0f} MiB", flush=True)

    def median(kind: str, side: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[kind][side])

    summary = {
        "sft_median_step_s": {side: median("sft", side, "median_step_s") for side in ("tuned", "default")},
        "decode_tokens_per_s": {side: median("decode", side, "tokens_per_s") for side in ("tuned", "default")},
        "minor_faults": {kind: {side: median(kind, side, "minor_faults") for side in ("tuned", "default")}
                         for kind in runs},
        "peak_rss_mib": {kind: {side: median(kind, side, "peak_rss_mib") for side in ("tuned", "default")}
                         for kind in runs},
    }
    summary["ratios"] = {
        "sft_step_speedup": summary["sft_median_step_s"]["default"] / summary["sft_median_step_s"]["tuned"],
        "decode_speedup": summary["decode_tokens_per_s"]["tuned"] / summary["decode_tokens_per_s"]["default"],
        "sft_peak_rss": summary["peak_rss_mib"]["sft"]["tuned"] / summary["peak_rss_mib"]["sft"]["default"],
        "decode_peak_rss": summary["peak_rss_mib"]["decode"]["tuned"] / summary["peak_rss_mib"]["decode"]["default"],
    }
    settings = {"repeats": args.repeats, "sft": {"steps": args.steps, "batch": args.batch,
                                                  "tokens": PROMPT_TOKENS, "trained_tokens": TRAINED_TOKENS},
                "decode": {"rows": 32, "max_tokens": 64, "greedy": True}}
    measured.write({"summary": summary, "settings": settings, "runs": runs}, RESULTS)
    print(json.dumps(summary["ratios"], indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
