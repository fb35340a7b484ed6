"""Benchmark: ``factrl serve`` over a trained checkpoint pair: latency, throughput, and batching.

A real ``factrl serve`` process (uvicorn on 127.0.0.1, a free port) loads a finished run's HARIS pair
and index (``--workspace``: a directory with ``models/reason_<r>``, ``models/search_<r>`` and
``index/``, e.g. a ``make demo`` checkout; the limits and retrieval mode are its ``evaluate``
section's, so the service answers as ``evaluate`` scored it) and is asked, over HTTP, to verify
held-out claims (the workspace's ``data/claims/eval.parquet``, never trained on):

* **concurrency 1**: ``--single`` claims one after another, each a ``POST /v1/verify`` polled until done;
* **concurrency 16**: ``--concurrent`` clients each post one claim at once (a barrier), then poll;
* **one batch**: the same claims in one ``POST /v1/verify/batch``, timed until the job is done.

Latency per claim is the client's wall time from its POST to seeing its result (read from the job's results stream, which the server feeds every 50 ms).
``concurrent_vs_batch_ratio`` = (time of the one batch) / (wall time of the concurrent single-claim
requests, first POST to last result): 1.0 means concurrent clients cost what one batch costs; lower
means the batching worker lost time (claims split over several batches); the issue's goal is >= 0.8.
The two runs verify the same claims greedily, so they do the same model work. ``--repeats`` alternates
the two (concurrent first, then batch) and reports each pair and the median ratio.

The decomposer's figures (recall / precision on the labelled multi-claim texts) are recomputed for
``sentences`` as ``bench/decompose.py`` does, and the ``llm`` backend's are read from
``bench/results/decompose.json`` (a SmolLM2 server run takes minutes; rerun that bench to refresh).

Writes ``bench/results/serve.json`` (with ``measured``: commit, load average, CPU kind).

    python -m bench.serve --workspace /work/run-clean [--round 0] [--single 4] [--concurrent 16] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench._measured import Measurement

RESULTS = Path(__file__).parent / "results" / "serve.json"
DECOMPOSE_RESULTS = Path(__file__).parent / "results" / "decompose.json"


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, linearly interpolated (numpy's default)."""
    import numpy as np

    return float(np.quantile(np.asarray(values, dtype=float), q))


def stream_job(client, job_id: str, total: int) -> tuple[list[dict], list[float]]:
    """Read ``GET /v1/jobs/{id}/results.jsonl`` to its end: (the results, the monotonic time each
    line arrived). The stream (the server checks for new results every 50 ms) is used instead of
    polling ``GET /v1/jobs/{id}``: 16 clients polling every few ms are hundreds of requests a second
    that take the server's GIL from the batching worker, and the bench would measure its own load."""
    results, arrived = [], []
    with client.stream("GET", f"/v1/jobs/{job_id}/results.jsonl") as answer:
        answer.raise_for_status()
        for line in answer.iter_lines():
            if line.strip():
                results.append(json.loads(line))
                arrived.append(time.monotonic())
    if len(results) != total:
        raise RuntimeError(f"job {job_id}: the stream ended after {len(results)} of {total} results")
    return results, arrived


def one_claim(url: str, claim: str, timeout: float, client=None) -> dict:
    """POST one claim and wait for it: ``{"latency_s", "result", "posted", "finished"}`` (monotonic
    times). ``client``: an open ``httpx.Client`` on ``url`` (default: a new one)."""
    import httpx

    if client is None:
        with httpx.Client(base_url=url, timeout=timeout) as client:
            return one_claim(url, claim, timeout, client)
    posted = time.monotonic()
    answer = client.post("/v1/verify", json={"claim": claim})
    answer.raise_for_status()
    [result], [finished] = stream_job(client, answer.json()["job_id"], 1)
    return {"latency_s": finished - posted, "result": result, "posted": posted, "finished": finished}


def sequential(url: str, claims: list[str], timeout: float) -> list[dict]:
    return [one_claim(url, c, timeout) for c in claims]


def concurrent(url: str, claims: list[str], timeout: float) -> tuple[list[dict], float]:
    """Every claim from its own client thread, released together: (per-claim records, wall seconds
    from the first POST to the last result). The clients are built and connected before the release:
    building an ``httpx.Client`` (its TLS context) costs ~0.1 s of CPU, and 16 of them after the
    release spread the requests over seconds on a busy machine: the clients', not the service's, delay."""
    import httpx

    clients = [httpx.Client(base_url=url, timeout=timeout) for _ in claims]
    for client in clients:
        client.get("/healthz").raise_for_status()  # the connection is open before the release
    barrier, out, errors = threading.Barrier(len(claims)), [None] * len(claims), []

    def ask(i: int) -> None:
        try:
            barrier.wait()
            out[i] = one_claim(url, claims[i], timeout, clients[i])
        except Exception as err:  # reported below, not lost in a thread
            errors.append(err)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(claims))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for client in clients:
        client.close()
    if errors:
        raise errors[0]
    return out, max(r["finished"] for r in out) - min(r["posted"] for r in out)


def one_batch(url: str, claims: list[str], timeout: float) -> tuple[dict, float]:
    """All claims in one ``POST /v1/verify/batch``: (the job's snapshot, wall seconds to done)."""
    import httpx

    body = "\n".join(json.dumps({"id": f"c{i}", "claim": c}) for i, c in enumerate(claims))
    with httpx.Client(base_url=url, timeout=timeout) as client:
        posted = time.monotonic()
        answer = client.post("/v1/verify/batch", content=body)
        answer.raise_for_status()
        results, arrived = stream_job(client, answer.json()["job_id"], len(claims))
    return {"results": results, "failed": sum(r["status"] != "done" for r in results)}, max(arrived) - posted


def latency_summary(records: list[dict]) -> dict:
    lat = [r["latency_s"] for r in records]
    return {"claims": len(lat), "p50_s": percentile(lat, 0.5), "p95_s": percentile(lat, 0.95),
            "mean_s": statistics.fmean(lat), "max_s": max(lat),
            "batch_sizes": sorted(r["result"].get("batch_size") or 0 for r in records)}


def decomposer_figures() -> dict:
    """Recall / precision of both decomposer backends on the labelled texts (see the module docstring)."""
    from decompose import run_backend

    from factrl.verify.texts import labelled_texts

    stored = json.loads(DECOMPOSE_RESULTS.read_text()) if DECOMPOSE_RESULTS.is_file() else {}
    texts = labelled_texts(stored.get("texts", 30), seed=stored.get("seed", 0))
    keep = ("recall", "precision", "gold", "found", "recovered", "extra", "exact_offset_rate", "unparseable_replies")
    fresh = run_backend(texts, "sentences", runs=1)
    out = {"texts": len(texts), "recovered_if": stored.get("recovered_if"),
           "sentences": {k: fresh[k] for k in keep} | {"source": "recomputed now"}}
    llm = stored.get("backends", {}).get("llm")
    if llm is not None:
        out["llm"] = {k: llm.get(k) for k in keep} | {
            "texts": llm.get("texts"), "model": llm.get("model"),
            "source": f"bench/results/decompose.json (commit {stored.get('measured', {}).get('commit')})"}
    return out


def workspace_setup(workspace: Path, round_: int, tmp: Path, args) -> tuple[Path, dict]:
    """A params file serving ``workspace``'s round-``round_`` pair and index with its ``evaluate``
    limits; (its path, a record of what is served)."""
    import yaml

    from factrl.config import from_dict, read_params
    from factrl.eval.params import EvaluateParams
    from factrl.service.params import index_hash, model_hash

    reason, search, index = (workspace / "models" / f"reason_{round_}", workspace / "models" / f"search_{round_}",
                             workspace / "index")
    for path in (reason, search, index / "manifest.json"):
        if not path.exists():
            raise SystemExit(f"bench/serve.py: --workspace {workspace}: {path} is missing (a finished run's "
                             f"models/ and index/ are needed)")
    params_file = workspace / "params.yaml"
    evaluate = (from_dict(EvaluateParams, read_params(params_file).get("evaluate"), where=f"{params_file}:evaluate")
                if params_file.is_file() else EvaluateParams())
    serve = {"port": args.port, "index": str(index), "retrieval_mode": evaluate.retrieval_mode,
             "top_k": evaluate.top_k, "max_turns": evaluate.max_turns, "max_new_tokens": evaluate.max_new_tokens,
             "device": "cpu", "precision": args.precision, "batch_size": args.batch_size,
             "max_wait_ms": args.max_wait_ms,
             "checkpoints": [{"name": f"round {round_}", "reason": str(reason), "search": str(search)}],
             "corrections_db": str(tmp / "corrections.sqlite"), "calibration_dir": str(tmp / "calibration")}
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump({"serve": serve}))

    def trained(model: Path) -> dict:
        meta = json.loads((model / "factrl_train.json").read_text()) if (model / "factrl_train.json").is_file() else {}
        return {"path": str(model), "hash": model_hash(str(model)),
                **{k: meta.get(k) for k in ("agent", "base_model", "steps", "warm_start", "source")}}

    served = {"workspace": str(workspace), "round": round_, "reason": trained(reason), "search": trained(search),
              "index": {"path": str(index), "hash": index_hash(index),
                        **{k: json.loads((index / "manifest.json").read_text()).get(k) for k in ("count", "embedder")}},
              "serve_params": {k: v for k, v in serve.items() if k not in ("corrections_db", "calibration_dir", "port")}}
    return path, served


def held_out_claims(workspace: Path, n: int, seed: int) -> list[str]:
    """``n`` claims of the workspace's held-out set (eval.parquet), shuffled with ``seed``."""
    import random

    import pyarrow.parquet as pq

    path = workspace / "data" / "claims" / "eval.parquet"
    claims = pq.read_table(path, columns=["claim"]).column("claim").to_pylist()
    if len(claims) < n:
        raise SystemExit(f"bench/serve.py: {path} has {len(claims)} claims, {n} needed")
    random.Random(seed).shuffle(claims)
    return claims[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workspace", type=Path, required=True, help="a finished run: models/, index/, data/claims/")
    ap.add_argument("--round", type=int, default=0, help="the models/*_<round> pair (0: the warm start)")
    ap.add_argument("--single", type=int, default=4, help="claims verified one at a time (concurrency 1)")
    ap.add_argument("--concurrent", type=int, default=16, help="concurrent single-claim clients, and the batch size")
    ap.add_argument("--repeats", type=int, default=1, help="(concurrent, batch) pairs")
    ap.add_argument("--batch-size", type=int, default=16, help="serve.batch_size")
    ap.add_argument("--max-wait-ms", type=float, default=None, help="serve.max_wait_ms (default: ServeParams')")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one job may take")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    measured = Measurement(args.precision)
    import httpx

    from factrl.servers import free_port, spawn
    from factrl.service.params import ServeParams

    if args.max_wait_ms is None:
        args.max_wait_ms = ServeParams.max_wait_ms
    args.port = free_port()
    workspace = args.workspace.resolve()
    claims = held_out_claims(workspace, args.single + args.concurrent + 1, args.seed)
    warmup, single, group = claims[0], claims[1:1 + args.single], claims[1 + args.single:]
    with tempfile.TemporaryDirectory(prefix="factrl-bench-serve-") as tmp:
        params_file, served = workspace_setup(workspace, args.round, Path(tmp), args)
        url = f"http://127.0.0.1:{args.port}"
        command = [sys.executable, "-m", "factrl.cli", "serve", "--params", str(params_file)]
        started = time.monotonic()
        with spawn(command, f"{url}/healthz", timeout=600, name="factrl serve", log_path=Path(tmp) / "serve.log"):
            startup_s = time.monotonic() - started
            one_claim(url, warmup, args.timeout)  # first-call costs (tokenizer caches, allocator) are not a claim's
            print(f"serve up in {startup_s:.1f}s; concurrency 1 on {len(single)} claims", flush=True)
            seq = sequential(url, single, args.timeout)
            pairs = []
            for r in range(args.repeats):
                print(f"repeat {r}: {len(group)} concurrent requests", flush=True)
                conc, conc_s = concurrent(url, group, args.timeout)
                print(f"  {conc_s:.1f}s; one batch of {len(group)}", flush=True)
                snap, batch_s = one_batch(url, group, args.timeout)
                print(f"  {batch_s:.1f}s", flush=True)
                pairs.append({"concurrent_s": conc_s, "batch_s": batch_s, "ratio": batch_s / conc_s,
                              "concurrent_batch_sizes": latency_summary(conc)["batch_sizes"],
                              "batch_batch_sizes": sorted(r.get("batch_size") or 0 for r in snap["results"]),
                              "concurrent_latency": latency_summary(conc),
                              "failed": snap["failed"] + sum(r["result"]["status"] != "done" for r in conc)})
            health = httpx.get(f"{url}/healthz", timeout=30).json()
    every = seq + conc
    verdicts = [r["result"].get("verdict") for r in every]
    result = {
        "what": "factrl serve over HTTP on held-out demo claims: latency per claim at concurrency 1 and "
                f"{args.concurrent}, claims per second, concurrent requests vs one batch",
        "checkpoints": served,
        "claims_file": str(workspace / "data" / "claims" / "eval.parquet"),
        "startup_s": startup_s,
        "concurrency": {
            "1": latency_summary(seq) | {"claims_per_s": len(seq) / sum(r["latency_s"] for r in seq)},
            str(args.concurrent): pairs[-1]["concurrent_latency"] | {
                "claims_per_s": args.concurrent / pairs[-1]["concurrent_s"], "wall_s": pairs[-1]["concurrent_s"]},
        },
        "claims_per_s": args.concurrent / statistics.median(p["concurrent_s"] for p in pairs),
        "batch_of_16_s": statistics.median(p["batch_s"] for p in pairs),
        "concurrent_vs_batch_ratio": statistics.median(p["ratio"] for p in pairs),
        "ratio_direction": "time of one /v1/verify/batch job of the N claims divided by the wall time of N "
                           "concurrent single-claim /v1/verify requests (same claims); 1.0 = concurrent "
                           "requests cost one batch, lower = batching lost time; goal >= 0.8",
        "repeats": pairs,
        "verdicts": {str(v): verdicts.count(v) for v in set(verdicts)},
        "citations_per_claim": statistics.fmean(len(r["result"].get("citations") or []) for r in every),
        "worker_batches": health.get("batches"),
        "niceness": os.nice(0),  # the bench's and the server's CPU priority beside other work
        "decomposer": decomposer_figures(),
    }
    print(json.dumps(measured.write(result, args.out), indent=2))


if __name__ == "__main__":
    main()
