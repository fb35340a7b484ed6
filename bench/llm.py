"""LLM engine speed benchmark -> bench/results/llm.json (all numbers from one run).

Measures, each as the median of ``--repeats`` runs on the same chat prompts, greedy decoding:
- local_vs_generate: LocalLLM batched generated tokens/s over plain ``model.generate`` tokens/s
  (one left-padded batch, same prompts, same max new tokens).
- server_vs_inprocess: tokens/s through ``factrl serve-llm`` (uvicorn on a free loopback port) with
  ``--clients`` concurrent clients, one prompt per request, over in-process LocalLLM tokens/s on the
  same prompts as one batch.

Usage: python bench/llm.py [--prompts 16] [--max-tokens 32] [--repeats 3] [--precision auto]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

from factrl.llm.base import SamplingParams
from factrl.llm.local import LocalLLM
from factrl.llm.openai_compat import OpenAICompatLLM
from factrl.llm.serve import create_app
from _measured import Measurement

RESULTS = Path(__file__).parent / "results" / "llm.json"
TOPICS = ["the Eiffel Tower", "photosynthesis", "the Moon landing", "Mount Everest", "the Nile",
          "penicillin", "the printing press", "Jupiter", "the Roman Empire", "volcanoes",
          "honey bees", "the Great Wall", "electric cars", "the Olympic Games", "coral reefs", "chess"]


def prompts(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"Write three facts about {TOPICS[i % len(TOPICS)]}."}] for i in range(n)]


def timed(fn) -> tuple[float, int]:
    """(seconds, generated tokens) of one call of ``fn`` returning a token count."""
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
    # count each row's tokens up to and including its first EOS, as the engine returns them
    total = 0
    for row in gen.tolist():
        n = 0
        for t in row:
            n += 1
            if t in llm.eos_ids:
                break
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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: the machine is shared)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
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
        # on a shared machine (load averages in "measured") absolute rates are noisy, the
        # interleaved ratios much less so
        "model": args.model, "prompts": args.prompts, "clients": args.clients,
        "max_tokens": args.max_tokens, "repeats": args.repeats, "precision": args.precision,
        "engine_tokens_per_s": median_rate(engine),
        "generate_tokens_per_s": median_rate(generate),
        "server_tokens_per_s": median_rate(http),
        "runs": {"engine": engine, "generate": generate, "server": http},
    }
    results["inprocess_tokens_per_s"] = results["engine_tokens_per_s"]
    results["local_vs_generate"] = results["engine_tokens_per_s"] / results["generate_tokens_per_s"]
    results["server_vs_inprocess"] = results["server_tokens_per_s"] / results["engine_tokens_per_s"]
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}), file=sys.stderr, flush=True)
    return measured.write(results, args.out)


if __name__ == "__main__":
    main()
