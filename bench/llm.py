"""LLM engine speed benchmark -> bench/results/llm.json (all numbers from one run).

Measures, each as the median of ``--repeats`` interleaved runs, greedy decoding:
- local_vs_generate: LocalLLM batched generated tokens/s over plain ``model.generate`` tokens/s
  (one left-padded batch, same prompts, same max new tokens).
- server_vs_inprocess: tokens/s through ``factrl serve-llm`` (uvicorn on a free loopback port) with
  ``--clients`` concurrent clients, one prompt per request, over in-process LocalLLM tokens/s on the
  same prompts as one batch.
- transformers_cb_vs_local: transformers' own continuous batching (``ContinuousBatchingManager``,
  what ``generate_batch`` runs) over LocalLLM, generated tokens/s on the same weights, on two
  workloads: ``plain`` (``--prompts`` chat prompts x ``--cb-max-tokens`` tokens) and
  ``haris_rollout`` (the generation turns of HARIS rollouts as bench/rollout.py runs them, recorded
  from one LocalLLM run and replayed turn after turn on both engines: same prompts, same token
  counts, a claim's next turn submitted when its previous one finished). transformers' engine has
  no stop strings, so it cannot run the agent loops themselves. Per precision of ``--cb-precisions``
  (``auto`` resolved on this CPU, duplicates measured once); the first is the headline.

Every part records the commit, the load average and the CPU capability it was measured at.
``--parts`` runs a subset (the others are kept from the existing file).

Usage: python -m bench.llm [--prompts 16] [--max-tokens 32] [--repeats 3] [--precision auto]
           [--parts local,transformers_cb] [--claims 16] [--cb-precisions auto,fp32]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import transformers

from bench._measured import Measurement
from bench.rollout import bench_haris, demo_setup
from factrl.hardware import resolve_precision
from factrl.llm.base import SamplingParams
from factrl.llm.local import LocalLLM
from factrl.llm.openai_compat import OpenAICompatLLM
from factrl.llm.serve import create_app

RESULTS = Path(__file__).parent / "results" / "llm.json"
TOPICS = ["the Eiffel Tower", "photosynthesis", "the Moon landing", "Mount Everest", "the Nile",
          "penicillin", "the printing press", "Jupiter", "the Roman Empire", "volcanoes",
          "honey bees", "the Great Wall", "electric cars", "the Olympic Games", "coral reefs", "chess"]


def prompts(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"Write three facts about {TOPICS[i % len(TOPICS)]}."}] for i in range(n)]


def timed(fn):
    """(seconds, what ``fn`` returned) of one call of ``fn``."""
    t0 = time.perf_counter()
    tokens = fn()
    return time.perf_counter() - t0, tokens


def engine_tokens(llm: LocalLLM, convs, params) -> int:
    return sum(c.completion_tokens for cs in llm.chat(convs, params) for c in cs)


def generate_tokens(llm: LocalLLM, convs, max_tokens: int) -> int:
    """Plain ``model.generate`` over the same prompts, one left-padded batch."""
    rows = [llm.encode_chat(c) for c in convs]
    width = max(map(len, rows))
    ids = torch.tensor([[llm.pad_id] * (width - len(r)) + r for r in rows])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(r) for r in rows])[:, None]).long()
    with torch.inference_mode():  # the same module (and precision) the engine decodes with
        out = llm.engine_model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens, do_sample=False,
            pad_token_id=llm.pad_id, eos_token_id=sorted(llm.eos_ids),
        )
    gen = out[:, width:]
    # count each row's tokens up to (not including) its first EOS, as the engine does
    total = 0
    for row in gen.tolist():
        n = 0
        for t in row:
            if t in llm.eos_ids:
                break
            n += 1
        total += n
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(llm: LocalLLM, max_batch: int):
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(llm, 10.0, max_batch), host="127.0.0.1", port=port,
                                           log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port}/v1"


def median_rate(runs: list[tuple[float, int]]) -> float:
    return statistics.median(tokens / secs for secs, tokens in runs)


# ---- transformers' continuous batching vs LocalLLM ----------------------------------------------
# A workload is a list of chains, one per conversation: each link is (prompt ids, tokens to
# generate), and a link is submitted only once the link before it finished (an agent turn waits for
# the turn, or the search agent, before it). Both engines run every link greedily to exactly its
# token count (EOS ignored), so they decode the same prompts for the same number of tokens.
Chain = list[tuple[list[int], int]]


def plain_chains(llm: LocalLLM, n: int, max_tokens: int) -> list[Chain]:
    """Plain batched generation: ``n`` chat prompts, ``max_tokens`` each, all submitted at once."""
    return [[(llm.encode_chat(c), max_tokens)] for c in prompts(n)]


def model_turns(traj) -> Chain:
    """The generation turns of one trajectory: each run of loss-mask 1 (the policy's tokens, an
    EOS it stopped on included) with the context it continued."""
    ids, turns, start = traj.prompt_ids + traj.response_ids, [], None
    for i, generated in enumerate([*traj.loss_mask, 0]):
        if generated and start is None:
            start = i
        elif not generated and start is not None:
            turns.append((ids[: len(traj.prompt_ids) + start], i - start))
            start = None
    return turns


def haris_chains(results) -> list[Chain]:
    """The turns of HARIS rollouts in the order each claim ran them: reasoning turn k, then every
    turn of the search agent answering its question k, then reasoning turn k + 1."""
    chains = []
    for r in results:
        chain: Chain = []
        for k, turn in enumerate(model_turns(r.trajectory)):
            chain.append(turn)
            if k < len(r.searches) and r.searches[k] is not None:
                chain += model_turns(r.searches[k].trajectory)
        chains.append(chain)
    return chains


def run_chains(submit, next_finished, chains: list[Chain]) -> list[list[list[int]]]:
    """Drive ``chains`` through an engine: ``submit(key, prompt, tokens)`` queues one link and
    ``next_finished()`` blocks until links finish, returning ``[(key, generated ids)]``. Returns
    the generated ids of every link, per chain."""
    outputs: list[list[list[int]]] = [[] for _ in chains]
    pending = 0
    for c, chain in enumerate(chains):
        if chain:
            submit(c, *chain[0])
            pending += 1
    while pending:
        for c, ids in next_finished():
            outputs[c].append(ids)
            pending -= 1
            if len(outputs[c]) < len(chains[c]):
                submit(c, *chains[c][len(outputs[c])])
                pending += 1
    return outputs


def local_chains(llm: LocalLLM, chains: list[Chain]) -> list[list[list[int]]]:
    """The workload on LocalLLM's step engine, from a cold prefix cache (the slot storage stays)."""
    llm.clear_prefix_cache()
    owner = {}  # id(request) -> chain; the engine holds each request until step() returns it

    def submit(c, prompt, tokens):
        owner[id(llm.submit(prompt, SamplingParams(max_tokens=tokens, ignore_eos=True)))] = c

    return run_chains(submit, lambda: [(owner.pop(id(r)), r.completion.token_ids) for r in llm.step()], chains)


class LibraryEngine:
    """transformers' continuous batching (``ContinuousBatchingManager``: paged cache, packed
    prefill and decode, prefix block sharing) on the given weights, greedy, EOS off. Its cache is
    sized to each workload: auto-sizing takes a share of all free memory, and its sdpa path (the
    only one on CPU) builds a dense attention mask over every key the batch's rows read."""

    def __init__(self, model, max_batch: int, page_size: int, max_batch_tokens: int):
        from transformers import GenerationConfig

        self.model = model
        self.generation_config = GenerationConfig(do_sample=False, eos_token_id=-1, max_new_tokens=1)
        self.max_batch, self.page_size, self.max_batch_tokens = max_batch, page_size, max_batch_tokens
        self._ids = itertools.count()

    def run(self, chains: list[Chain]) -> tuple[float, list[list[list[int]]]]:
        """(seconds, outputs) of the workload on a fresh manager (a cold prefix cache, like
        :func:`local_chains`); setting the manager up and its warm-up are not timed."""
        from transformers import ContinuousBatchingConfig

        # each chain holds at most one link at a time: room for its longest, plus a page per row
        blocks = sum(max(math.ceil((len(p) + n) / self.page_size) for p, n in chain) + 1 for chain in chains)
        config = ContinuousBatchingConfig(page_size=self.page_size, num_blocks=blocks,
                                          max_batch_tokens=self.max_batch_tokens,
                                          max_requests_per_batch=self.max_batch)
        manager = self.model.init_continuous_batching(generation_config=self.generation_config,
                                                      continuous_batching_config=config)
        manager.warmup()
        manager.start()
        try:
            def submit(c, prompt, tokens):
                manager.add_request(prompt, request_id=f"{c}:{next(self._ids)}", max_new_tokens=tokens)

            def next_finished():
                while (out := manager.get_result(timeout=60)) is None or not out.is_finished():
                    if out is None and not manager.is_running():
                        raise RuntimeError("transformers' continuous batching loop stopped")
                if out.error is not None:
                    raise RuntimeError(f"transformers' continuous batching failed: {out.error}")
                return [(int(out.request_id.split(":")[0]), list(out.generated_tokens))]

            t0 = time.perf_counter()
            outputs = run_chains(submit, next_finished, chains)
            return time.perf_counter() - t0, outputs
        finally:
            manager.stop(block=True)
            manager.destroy()


def rate(outputs: list[list[list[int]]], seconds: float) -> float:
    return sum(len(ids) for chain in outputs for ids in chain) / seconds


def compare_engines(llm: LocalLLM, library: LibraryEngine, chains: list[Chain], repeats: int) -> dict:
    """Interleaved repeats of one workload on both engines; medians of generated tokens/s, the
    library's over LocalLLM's, and how many links both decoded to the same ids (greedy, same weights)."""
    local_runs, library_runs = [], []
    for _ in range(repeats):  # interleaved so that load drift hits both sides alike
        local_runs.append(timed(lambda: local_chains(llm, chains)))
        library_runs.append(library.run(chains))
        print(f"local {local_runs[-1][0]:.1f}s library {library_runs[-1][0]:.1f}s", file=sys.stderr, flush=True)
    links = [(a, b) for la, lb in zip(local_runs[-1][1], library_runs[-1][1]) for a, b in zip(la, lb)]
    local_rate = statistics.median(rate(out, s) for s, out in local_runs)
    library_rate = statistics.median(rate(out, s) for s, out in library_runs)
    return {
        "chains": len(chains), "links": sum(map(len, chains)),
        "generated_tokens": sum(n for chain in chains for _, n in chain),
        "prompt_tokens": sum(len(p) for chain in chains for p, _ in chain),
        "local_tokens_per_s": round(local_rate, 2), "transformers_cb_tokens_per_s": round(library_rate, 2),
        "ratio": round(library_rate / local_rate, 3),
        "same_ids_links": sum(a == b for a, b in links),
        "runs_s": {"local": [round(s, 2) for s, _ in local_runs],
                   "transformers_cb": [round(s, 2) for s, _ in library_runs]},
    }


def engine_choice(args) -> dict:
    """transformers_cb_vs_local: both workloads per precision; see the module docstring."""
    measured = Measurement(args.cb_precisions.split(",")[0])
    by_precision = {}
    for requested in args.cb_precisions.split(","):
        precision = resolve_precision(requested)
        if precision in by_precision:
            by_precision[precision]["requested"].append(requested)
            continue
        llm = LocalLLM(args.model, precision=precision, max_batch=args.cb_max_batch)
        # the engine decodes with a module of its own, so the library's manager can switch the
        # attention of the loaded model (the same weights) without touching LocalLLM
        library = LibraryEngine(llm.model, args.cb_max_batch, args.cb_page_size, args.cb_max_batch_tokens)
        warmup = plain_chains(llm, 2, 4)
        local_chains(llm, warmup)
        library.run(warmup)
        with tempfile.TemporaryDirectory() as d:
            claims, retriever = demo_setup(Path(d), args.claims)
            t0 = time.perf_counter()
            results = bench_haris(llm, retriever, args.cb_max_tokens).verify(claims)
            live_s = time.perf_counter() - t0
        haris = haris_chains(results)
        rollout = compare_engines(llm, library, haris, args.repeats)
        # the recorded run itself: the agent loops with retrieval and re-encoding, cold, once
        rollout["local_live_agent_loops_tokens_per_s"] = round(rollout["generated_tokens"] / live_s, 2)
        by_precision[precision] = {
            "requested": [requested],
            "plain": compare_engines(llm, library, plain_chains(llm, args.prompts, args.cb_max_tokens), args.repeats),
            "haris_rollout": rollout,
        }
    headline = next(iter(by_precision.values()))
    ratios = {w: headline[w]["ratio"] for w in ("plain", "haris_rollout")}
    return {
        "measured": measured.record(),
        "transformers": transformers.__version__, "model": args.model, "repeats": args.repeats,
        "claims": args.claims, "prompts": args.prompts, "max_tokens": args.cb_max_tokens,
        "max_batch": args.cb_max_batch,
        "library_config": {"attention": "sdpa (no flash attention on CPU)", "page_size": args.cb_page_size,
                           "max_batch_tokens": args.cb_max_batch_tokens,
                           "num_blocks": "sized to each workload (its chains' longest links)"},
        **ratios,
        "library_within_15pct_on_both": all(r >= 0.85 for r in ratios.values()),
        "by_precision": by_precision,
    }


def local_parts(args) -> dict:
    """local_vs_generate and server_vs_inprocess (see the module docstring)."""
    measured = Measurement(args.precision)
    llm = LocalLLM(args.model, precision=args.precision, max_batch=max(args.prompts, args.clients))
    convs = prompts(args.prompts)
    params = SamplingParams(max_tokens=args.max_tokens)
    engine_tokens(llm, convs[:2], SamplingParams(max_tokens=4))  # warm-up

    engine, generate = [], []
    for _ in range(args.repeats):  # interleaved so that load drift hits both sides alike
        engine.append(timed(lambda: engine_tokens(llm, convs, params)))
        generate.append(timed(lambda: generate_tokens(llm, convs, args.max_tokens)))
        print(f"engine {engine[-1]} generate {generate[-1]}", file=sys.stderr, flush=True)

    server, url = start_server(llm, max(args.prompts, args.clients))
    client = OpenAICompatLLM(llm.model_name, base_url=url, api_key="unused", concurrency=args.clients)
    http = []
    try:
        client.chat(convs[:2], SamplingParams(max_tokens=4))  # warm-up
        for _ in range(args.repeats):
            http.append(timed(lambda: sum(c.completion_tokens for cs in client.chat(convs, params) for c in cs)))
            print(f"server {http[-1]}", file=sys.stderr, flush=True)
    finally:
        server.should_exit = True

    results = {
        # other jobs ran on the same 2 cores during the run: absolute rates are noisy, the
        # interleaved ratios much less so
        "machine": measured.record(),
        "model": args.model, "prompts": args.prompts, "clients": args.clients,
        "max_tokens": args.max_tokens, "repeats": args.repeats, "precision": args.precision,
        "torch_threads": torch.get_num_threads(),
        "engine_tokens_per_s": median_rate(engine),
        "generate_tokens_per_s": median_rate(generate),
        "server_tokens_per_s": median_rate(http),
        "runs": {"engine": engine, "generate": generate, "server": http},
    }
    results["inprocess_tokens_per_s"] = results["engine_tokens_per_s"]
    results["local_vs_generate"] = results["engine_tokens_per_s"] / results["generate_tokens_per_s"]
    results["server_vs_inprocess"] = results["server_tokens_per_s"] / results["engine_tokens_per_s"]
    return results


PARTS = ("local", "transformers_cb")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {PARTS}")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    ap.add_argument("--claims", type=int, default=16, help="HARIS rollouts of the haris_rollout workload")
    ap.add_argument("--cb-max-tokens", type=int, default=64,
                    help="tokens per plain prompt, and per HARIS turn (bench/rollout.py's --max-new-tokens)")
    ap.add_argument("--cb-precisions", default="auto,fp32")
    ap.add_argument("--cb-max-batch", type=int, default=32, help="rows decoded together, both engines")
    ap.add_argument("--cb-page-size", type=int, default=16,
                    help="transformers' paged cache page in tokens (smaller pages share more prefix: on the HARIS "
                         "workload 16 ran 1.6x faster than its default 256, within noise of 8 and 4)")
    ap.add_argument("--cb-max-batch-tokens", type=int, default=1024,
                    help="tokens per transformers forward (its prefill chunk)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: the machine is shared)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    parts = args.parts.split(",")
    if unknown := set(parts) - set(PARTS):
        ap.error(f"--parts: unknown {sorted(unknown)}; choose from {PARTS}")
    torch.set_num_threads(args.threads)
    measured = Measurement(args.precision)

    # a subset re-measures its own keys and keeps the others (each says when it was measured)
    results = json.loads(args.out.read_text()) if set(parts) != set(PARTS) and args.out.exists() else {}
    if "local" in parts:
        results.update(local_parts(args))
    if "transformers_cb" in parts:
        results["transformers_cb_vs_local"] = engine_choice(args)
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}), file=sys.stderr, flush=True)
    return measured.write({k: v for k, v in results.items() if k != "measured"}, args.out)


if __name__ == "__main__":
    main()
