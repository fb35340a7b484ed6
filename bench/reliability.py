"""Reliability benchmark -> bench/results/reliability.json (issue 41; docs/reliability.md says what
each key promises and what is not measured yet).

- ``load``: a real ``factrl serve-retriever`` process over the BM25 index of a generated demo world
  answers ``--clients`` concurrent clients (asyncio + httpx, one connection each) sending
  ``--requests`` one-query requests each: errors (must be 0), p50 / p99 latency, requests/s and the
  batched searches the micro-batcher ran. Then the limits (a body over ``max_body_bytes`` -> 413, too
  many or too long queries and a ``topk`` out of range -> 422), clients that disconnect mid-request
  (half a body sent; a full request whose answer is never read), a second concurrent wave that must
  still batch, and the process still alive and healthy at the end.
- ``load.llm``: a real ``factrl serve-llm`` process (``--llm-model``, default SmolLM2-135M) under
  the same ``--clients``, ``--llm-requests`` greedy chat requests each (8 tokens): errors, p50 / p99,
  requests/s and the batches the server ran; the limits (413 / 422); clients that hang up (those
  still queued are dropped before generating: ``dropped_before_generation``); a second wave that
  still batches; alive after.
- ``load.service``: ``factrl serve``'s app (``create_app``: limits, jobs, the batching worker, result
  streams) in its own uvicorn process over a fake verifier (``src/factrl/testing/service_fakes.py``,
  ``--service-delay`` s per batched call), so what is measured is the server, not HARIS: a request is
  a whole check (``POST /v1/verify``, then its ``results.jsonl`` read to the end); the limits; clients
  that hang up mid-body, before the answer, or on an open result stream; a second wave; alive after.
- ``load.service_haris`` (``--servers ...,service_haris --service-workspace RUN``): the same protocol
  against a real ``factrl serve`` over a finished run's trained HARIS pair and index (``make demo``'s),
  one held-out claim per client: what a user's checks cost with the real verifier behind the server.
- ``faults``: ``OpenAICompatLLM`` behind the disk cache against the fault-injecting server of
  src/factrl/testing/fault_llm.py (every fault kind on the first attempt of its share of ``--fault-records``):
  answered, lost, duplicated (a record sent again after it was answered), and the rerun's requests
  (the cache answers: must be 0). A sentinel key set only in the environment is searched for in the
  cache and the log (``secrets``).
- ``fuzz``: cases tried per parser by the property-based tests (``--fuzz``; runs pytest on them).
- ``records_lost``: the sum of every lost count above.

Sibling scripts write the other keys into the same file, and this one keeps what they wrote:
``kills`` and ``disk`` (bench/reliability_kills.py: SIGKILL at points of every stage's progress then a
rerun; a Prefect flow run killed mid-stage against dvc.lock; prepare on a full disk) and the per-stage
entries of ``faults`` (bench/reliability_faults.py: warmup's teacher, debate's openai members,
``evaluate --backend openai``, ``factrl serve``), and ``soak`` (bench/soak_service.py: tens of
thousands of requests against ``factrl serve``, its resident memory sampled). ``--with-disk`` / ``--with-stage-faults`` /
``--with-kills`` run them first (the kills take an hour or more on 2 cores).

Usage: nice -n 10 python -m bench.reliability [--clients 64] [--requests 20] [--no-fuzz] [--with-disk]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import io
import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench._measured import Measurement  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "reliability.json"
FUZZ_TESTS = ["tests/data/test_sources_fuzz.py", "tests/agents/test_protocol_fuzz.py", "tests/test_config_fuzz.py",
              "tests/llm/test_serve_fuzz.py"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def build_world(root: Path) -> tuple[Path, list[str]]:
    """A 2,000-passage demo world's BM25 index and its claims' sub-questions (the queries)."""
    from bench._world import demo_world
    from factrl.data.params import WorldParams

    table, index = demo_world(root, WorldParams(seed=5, num_passages=2000, num_claims=64, hops=(2, 3)))
    claims = table.to_pylist()
    return index, [h["question"] for c in claims for h in (c["hops"] or [])] or [c["claim"] for c in claims]


async def retrieve_one(http, queries: list[str], i: int) -> str | None:
    """One one-query ``/retrieve`` request (query ``i``): None when answered with 3 passages, else
    what went wrong."""
    answer = await http.post("/retrieve", json={"queries": [queries[i % len(queries)]], "topk": 3})
    return None if answer.status_code == 200 and len(answer.json()["result"][0]) == 3 else f"HTTP {answer.status_code}"


async def wave(url: str, queries: list[str], clients: int, per_client: int, request=retrieve_one,
               timeout: float = 60) -> dict:
    """``clients`` concurrent clients (one connection each), ``per_client`` sequential requests each;
    ``request(http, queries, i)`` sends the ``i``-th and returns None when it was answered right."""
    import httpx

    latencies: list[float] = []
    errors: collections.Counter[str] = collections.Counter()

    async def client(c: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=timeout) as http:
            for r in range(per_client):
                t0 = time.perf_counter()
                try:
                    wrong = await request(http, queries, c * per_client + r)
                    if wrong:
                        errors[wrong] += 1
                except (httpx.HTTPError, ValueError, KeyError) as exc:
                    errors[type(exc).__name__] += 1
                latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    wall = time.perf_counter() - t0
    return {"clients": clients, "requests": clients * per_client, "errors": sum(errors.values()),
            "error_kinds": dict(errors), "p50_ms": round(1000 * percentile(latencies, 0.5), 2),
            "p99_ms": round(1000 * percentile(latencies, 0.99), 2),
            "requests_per_s": round(clients * per_client / wall, 3), "wall_s": round(wall, 2)}


def limits_cases(url: str) -> dict:
    """Requests over the limits: expected and actual status of each."""
    import httpx

    from factrl.retrieval.server import Limits

    limits = Limits()
    cases = {
        "body_over_max_body_bytes": (413, {"content": b'{"queries": ["' + b"x" * (limits.max_body_bytes + 10) + b'"]}'}),
        "too_many_queries": (422, {"json": {"queries": ["q"] * (limits.max_queries + 1)}}),
        "query_too_long": (422, {"json": {"queries": ["q" * (limits.max_query_chars + 1)]}}),
        "topk_out_of_range": (422, {"json": {"queries": ["q"], "topk": limits.max_topk + 1}}),
        "not_json": (400, {"content": b"\x80not json"}),
    }
    out = {}
    for name, (expected, kwargs) in cases.items():
        got = httpx.post(f"{url}/retrieve", headers={"content-type": "application/json"}, timeout=60, **kwargs)
        out[name] = {"expected": expected, "status": got.status_code}
    return out


def disconnects(host: str, port: int, n: int = 16, path: str = "/retrieve", payload: dict | None = None) -> dict:
    """``n`` clients that send half a body and hang up, and ``n`` that send a full request and hang
    up before reading the answer."""
    body = json.dumps(payload or {"queries": ["who founded the studio"], "topk": 3}).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    for i in range(2 * n):
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(head + (body[: len(body) // 2] if i < n else body))
    return {"half_body": n, "unread_answer": n}


def load(args, measured_root: Path) -> dict:
    import httpx

    from factrl.servers import free_port, spawn

    index_dir, queries = build_world(measured_root)
    host, port = "127.0.0.1", free_port()
    url = f"http://{host}:{port}"
    cmd = [sys.executable, "-m", "factrl.cli", "serve-retriever", "--index", str(index_dir), "--mode", "bm25",
           "--host", host, "--port", str(port)]
    with spawn(cmd, f"{url}/health", timeout=180, log_path=measured_root / "retriever.log") as proc:
        asyncio.run(wave(url, queries, 8, 2))  # warm-up
        before = httpx.get(f"{url}/health").json()
        first = asyncio.run(wave(url, queries, args.clients, args.requests))
        mid = httpx.get(f"{url}/health").json()
        first["batched_searches"] = mid["batched_searches"] - before["batched_searches"]
        over = limits_cases(url)
        dropped = disconnects(host, port)
        second = asyncio.run(wave(url, queries, args.clients, max(2, args.requests // 4)))
        after = httpx.get(f"{url}/health")
        second["batched_searches"] = after.json()["batched_searches"] - mid["batched_searches"]
        alive = proc.poll() is None and after.status_code == 200
    return {"server": "factrl serve-retriever (BM25, 2,000-passage demo world, own process)",
            "wave": first, "limits": over,
            "limits_ok": all(c["status"] == c["expected"] for c in over.values()),
            "disconnects": dropped, "after_disconnects": second,
            "still_batching": second["batched_searches"] < second["requests"],
            "server_alive_after": alive}


def statuses(url: str, cases: dict[str, tuple[int, str, dict]]) -> dict:
    """``{name: (expected status, path, httpx.post kwargs)}`` sent once each: expected and actual."""
    import httpx

    out = {}
    for name, (expected, path, kwargs) in cases.items():
        got = httpx.post(f"{url}{path}", headers={"content-type": "application/json"}, timeout=120, **kwargs)
        out[name] = {"expected": expected, "status": got.status_code}
    return out


def load_llm(args, root: Path) -> dict:
    """A real ``factrl serve-llm`` process (``--llm-model``, greedy, ``max_tokens`` 8) under
    ``--clients`` concurrent chat clients, its limits, clients that hang up, a second wave."""
    import httpx

    from factrl.llm.serve import RequestLimits
    from factrl.servers import free_port, spawn

    host, port = "127.0.0.1", free_port()
    url = f"http://{host}:{port}"
    cmd = [sys.executable, "-m", "factrl.cli", "serve-llm", "--model", args.llm_model, "--served-model-name", "m",
           "--host", host, "--port", str(port)]
    prompts = [f"Is claim {i} about the studio true? Answer yes or no." for i in range(256)]

    async def chat(http, prompts: list[str], i: int) -> str | None:
        answer = await http.post("/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": prompts[i % len(prompts)]}], "max_tokens": 8,
            "temperature": 0})
        ok = answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] > 0
        return None if ok else f"HTTP {answer.status_code}"

    limits = RequestLimits()
    message = [{"role": "user", "content": "hi"}]
    cases = {
        "body_over_max_body_bytes": (413, "/v1/chat/completions", {"content": json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "x" * (limits.max_body_bytes + 10)}]}).encode()}),
        "n_over_max_n": (422, "/v1/chat/completions", {"json": {"model": "m", "messages": message,
                                                                 "n": limits.max_n + 1}}),
        "max_tokens_over_limit": (422, "/v1/chat/completions", {"json": {"model": "m", "messages": message,
                                                                          "max_tokens": limits.max_tokens + 1}}),
        "message_not_a_string": (422, "/v1/chat/completions", {"json": {"model": "m", "messages": [
            {"role": "user", "content": 5}]}}),
        "too_many_token_prompts": (422, "/v1/completions", {"json": {"model": "m", "prompt": [[1]] * (limits.max_n + 1)}}),
    }
    with spawn(cmd, f"{url}/health", timeout=300, log_path=root / "serve-llm.log") as proc:
        asyncio.run(wave(url, prompts, 4, 1, chat, timeout=600))  # warm-up
        before = httpx.get(f"{url}/health").json()
        first = asyncio.run(wave(url, prompts, args.clients, args.llm_requests, chat, timeout=600))
        mid = httpx.get(f"{url}/health").json()
        first["batches"] = mid["batches"] - before["batches"]
        over = statuses(url, cases)
        dropped = disconnects(host, port, path="/v1/chat/completions",
                              payload={"model": "m", "messages": message, "max_tokens": 8})
        second = asyncio.run(wave(url, prompts, args.clients, 1, chat, timeout=600))
        after = httpx.get(f"{url}/health")
        second["batches"] = after.json()["batches"] - mid["batches"]
        alive = proc.poll() is None and after.status_code == 200
    return {"server": f"factrl serve-llm --model {args.llm_model} (own process; chat, max_tokens 8, greedy)",
            "wave": first, "limits": over, "limits_ok": all(c["status"] == c["expected"] for c in over.values()),
            "disconnects": dropped | {"dropped_before_generation": after.json()["dropped"] - mid["dropped"]},
            "after_disconnects": second, "still_batching": second["batches"] < second["requests"],
            "server_alive_after": alive}


def service_limit_cases() -> dict[str, tuple[int, str, dict]]:
    """The requests ``factrl serve`` must refuse (413 over a size limit, 422 malformed), none verified."""
    from factrl.service.params import ServeParams

    params = ServeParams()
    return {
        "body_over_max_body_bytes": (413, "/v1/verify/batch", {"content": b'{"claim": "x"}\n' * (
            params.max_body_bytes // 14 + 1)}),
        "claim_over_max_claim_chars": (413, "/v1/verify", {"json": {"claim": "x" * (params.max_claim_chars + 1)}}),
        "text_over_max_text_chars": (413, "/v1/verify", {"json": {"text": "A b. " * (params.max_text_chars // 5 + 1)}}),
        "claims_over_max_claims_per_job": (413, "/v1/verify/batch", {"content": "\n".join(
            json.dumps({"id": str(i), "claim": f"c {i}"}) for i in range(params.max_claims_per_job + 1)).encode()}),
        "empty_claim": (422, "/v1/verify", {"json": {"claim": "  "}}),
        "bad_batch_line": (422, "/v1/verify/batch", {"content": b'{"id": "a", "claim": 5}\n'}),
        "not_json": (422, "/v1/verify", {"content": b"\x80not json"}),
    }


def service_check(expect=None, seen: list | None = None):
    """A ``wave`` request that is one whole check: ``POST /v1/verify``, then the job's
    ``results.jsonl`` read to its end. Wrong when the job does not yield exactly one result, the result
    is marked failed, or (``expect``) its verdict differs; every result is appended to ``seen``."""
    async def check(http, claims: list[str], i: int) -> str | None:
        job = await http.post("/v1/verify", json={"claim": claims[i % len(claims)]})
        if job.status_code != 200:
            return f"HTTP {job.status_code}"
        lines = (await http.get(f"/v1/jobs/{job.json()['job_id']}/results.jsonl")).text.splitlines()
        if len(lines) != 1:
            return f"{len(lines)} results"
        result = json.loads(lines[0])
        if seen is not None:
            seen.append(result)
        if result.get("status") == "failed":
            return "failed: " + str(result.get("error", ""))[:80]
        return None if expect is None or result["verdict"] == expect else "wrong result"
    return check


def exercise_service(url: str, proc, claims: list[str], check, clients: int, requests: int,
                     second_clients: int, second_requests: int, hang_ups: int) -> dict:
    """The load protocol of a running ``factrl serve`` (whatever verifies behind it): a warm-up, a wave
    of ``clients`` x ``requests`` checks, the limit cases, ``hang_ups`` clients of each kind that hang up
    (mid-body, before the answer, on an open result stream), a second wave that must still batch, and
    the process alive at the end. Batches are read from ``/healthz`` around each wave."""
    import httpx

    host, port = url.removeprefix("http://").split(":")
    asyncio.run(wave(url, claims, 2, 1, check, timeout=3600))  # warm-up: first-call costs are not the wave's
    before = httpx.get(f"{url}/healthz").json()
    print(f"{url}: wave of {clients} x {requests} checks", flush=True)
    first = asyncio.run(wave(url, claims, clients, requests, check, timeout=3600))
    print(f"wave: {first}", flush=True)
    mid = httpx.get(f"{url}/healthz").json()
    first["batches"] = mid["batches"] - before["batches"]
    over = statuses(url, service_limit_cases())
    dropped = disconnects(host, int(port), n=hang_ups, path="/v1/verify", payload={"claim": claims[0]})
    streams_dropped = drop_result_streams(url, host, int(port), n=hang_ups)
    print(f"limits {over}; hang-ups sent; second wave of {second_clients} x {second_requests}", flush=True)
    second = asyncio.run(wave(url, claims[::-1], second_clients, second_requests, check, timeout=3600))
    after = httpx.get(f"{url}/healthz")
    second["batches"] = after.json()["batches"] - mid["batches"]
    return {"wave": first, "limits": over, "limits_ok": all(c["status"] == c["expected"] for c in over.values()),
            "disconnects": dropped | {"result_streams_dropped": streams_dropped}, "after_disconnects": second,
            "still_batching": second["batches"] < second["requests"],
            "server_alive_after": proc.poll() is None and after.status_code == 200,
            "jobs_queued_after": after.json()["queued"]}


def load_service(args, root: Path) -> dict:
    """``factrl serve``'s app (real uvicorn process, limits, jobs, batching worker, result streams)
    over a fake verifier (``--service-delay`` s per batched call): what is measured is the server."""
    from factrl.servers import free_port, spawn

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "factrl.testing.service_fakes", "--port", str(port), "--dir", str(root),
           "--delay", str(args.service_delay)]
    claims = [f"Claim {i}: Orsa was founded by Ilse Parrow, which is true." for i in range(256)]
    with spawn(cmd, f"{url}/healthz", timeout=120, log_path=root / "serve.log",
               env={"PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}) as proc:
        out = exercise_service(url, proc, claims, service_check("SUPPORTS"), args.clients, args.service_requests,
                               args.clients, max(2, args.service_requests // 4), hang_ups=16)
    return {"server": f"factrl serve's app (create_app: limits, jobs, batching worker) over a fake verifier, "
                      f"{args.service_delay} s per batched call (own process): the server, not HARIS"} | out


def load_service_haris(args, root: Path) -> dict:
    """A real ``factrl serve`` (``factrl.cli serve``) over a finished run's trained HARIS pair and
    index (``--service-workspace``, round ``--service-round``, its ``evaluate`` limits, as
    bench/serve.py serves it) under ``--clients`` concurrent clients, one held-out claim each: every
    check must come back with a result that is not marked failed (a claim the agents leave without a
    verdict is answered, and counted under ``verdicts``). Every claim is real SmolLM2 work, so the
    hang-up cases are ``--service-hang-ups`` (4) of each kind and the second wave 16 clients."""
    from serve import held_out_claims, workspace_setup

    from factrl.servers import free_port, spawn
    from factrl.service.params import ServeParams

    if args.service_workspace is None:
        raise SystemExit("bench/reliability.py: --servers service_haris needs --service-workspace (a finished run)")
    setup = argparse.Namespace(port=free_port(), precision="auto", batch_size=args.service_batch_size,
                               max_wait_ms=ServeParams.max_wait_ms)
    workspace = args.service_workspace.resolve()
    claims = held_out_claims(workspace, args.clients + 2, seed=0)
    params_file, served = workspace_setup(workspace, args.service_round, root, setup)
    url = f"http://127.0.0.1:{setup.port}"
    seen: list[dict] = []
    command = [sys.executable, "-m", "factrl.cli", "serve", "--params", str(params_file)]
    with spawn(command, f"{url}/healthz", timeout=600, name="factrl serve", log_path=root / "serve.log") as proc:
        out = exercise_service(url, proc, claims, service_check(seen=seen), args.clients, 1,
                               min(16, args.clients), 1, hang_ups=args.service_hang_ups)
    verdicts = collections.Counter(str(r.get("verdict")) for r in seen)
    return {"server": f"factrl serve (own process) over {workspace.name}'s round-{args.service_round} HARIS pair "
                      f"and index: real SmolLM2 agents, hybrid retrieval, batch size {args.service_batch_size}",
            "served": served, "verdicts": dict(verdicts),
            "with_citations": sum(1 for r in seen if r.get("citations"))} | out


def drop_result_streams(url: str, host: str, port: int, n: int = 16) -> int:
    """``n`` clients that start a job, open its ``results.jsonl`` stream and hang up unread."""
    import httpx

    for i in range(n):
        job = httpx.post(f"{url}/v1/verify", json={"claim": f"stream {i} is true"}, timeout=60).json()["job_id"]
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(f"GET /v1/jobs/{job}/results.jsonl HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    return n


def faults(records: int, tmp: Path) -> dict:
    """Every fault kind against the client and its cache; the rerun must send nothing."""
    from factrl.llm.base import SamplingParams
    from factrl.llm.cache import CachedLLM, DiskCache
    from factrl.llm.openai_compat import OpenAICompatLLM
    from factrl.testing.fault_llm import FAULTS, FaultyOpenAI, first_attempt_fails
    from factrl.testing.servers import running_app

    kinds = [*FAULTS, None]
    server = FaultyOpenAI(first_attempt_fails(kinds, lambda content: int(content.split()[-1])), timeout_sleep=3.0)
    key = f"sk-factrl-SENTINEL-{secrets.token_hex(12)}"
    os.environ["FACTRL_BENCH_KEY"] = key
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.DEBUG)
    convs = [[{"role": "user", "content": f"item {i}"}] for i in range(records)]
    try:
        with running_app(server.app) as url:
            client = OpenAICompatLLM("fake", base_url=f"{url}/v1", api_key_env="FACTRL_BENCH_KEY", concurrency=32,
                                     timeout=1.5, backoff_base=0.05)
            out = CachedLLM(client, DiskCache(tmp / "cache.sqlite")).chat(convs, SamplingParams(max_tokens=8))
            sent = server.requests
            CachedLLM(client, DiskCache(tmp / "cache.sqlite")).chat(convs, SamplingParams(max_tokens=8))
            rerun_requests = server.requests - sent
    finally:
        logging.getLogger().removeHandler(handler)
        del os.environ["FACTRL_BENCH_KEY"]
    answered = sum(o[0].text == f"echo item {i} #0" for i, o in enumerate(out))
    faulty = {i for i in range(records) if kinds[i % len(kinds)] is not None}
    duplicated = sum(server.attempts[f"item {i}"] - (2 if i in faulty else 1) for i in range(records))
    files = [p for p in tmp.rglob("*") if p.is_file()]
    leaks = sum(key.encode() in p.read_bytes() for p in files) + (key in log.getvalue())
    return ({"openai_compat_client": {"records": records, "answered": answered, "failed_with_reason": 0,
                                      "records_lost": records - answered, "duplicated_sends": duplicated,
                                      "faults_injected": dict(server.faults), "retries": client.usage.retries,
                                      "rerun_requests": rerun_requests}},
            {"sentinel_key_found_in": leaks, "files_searched": len(files) + 1, "key_reached_server":
             server.auth == {f"Bearer {key}"}})


def fuzz(tmp: Path) -> dict:
    counts = tmp / "fuzz.json"
    env = {**os.environ, "FACTRL_FUZZ_COUNTS": str(counts), "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FUZZ_TESTS], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    return {"passed": done.returncode == 0, "summary": done.stdout.strip().splitlines()[-1] if done.stdout else "",
            "cases_per_parser": json.loads(counts.read_text()) if counts.is_file() else {},
            "tests": FUZZ_TESTS + ["tests/retrieval/test_server_fuzz.py (not run here: builds a world)"]}


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=20, help="requests per client in the retriever's main wave")
    ap.add_argument("--servers", default="retriever,llm,service",
                    help="which servers to load (comma-separated); the others' figures are kept from --out")
    ap.add_argument("--llm-model", default="smollm2-135m", help="the model serve-llm serves under load")
    ap.add_argument("--llm-requests", type=int, default=2, help="chat requests per client (serve-llm)")
    ap.add_argument("--service-requests", type=int, default=8, help="checks per client (factrl serve)")
    ap.add_argument("--service-delay", type=float, default=0.05, help="the fake verifier's seconds per batch")
    ap.add_argument("--service-workspace", type=Path, default=None,
                    help="service_haris: a finished run (models/, index/, data/claims/eval.parquet), e.g. make demo's")
    ap.add_argument("--service-round", type=int, default=1, help="service_haris: the models/*_<round> pair")
    ap.add_argument("--service-batch-size", type=int, default=16, help="service_haris: serve.batch_size")
    ap.add_argument("--service-hang-ups", type=int, default=4, help="service_haris: clients of each hang-up kind")
    ap.add_argument("--fault-records", type=int, default=200)
    ap.add_argument("--no-fuzz", dest="fuzz", action="store_false")
    ap.add_argument("--no-faults", dest="faults", action="store_false",
                    help="keep the client fault and secret figures from --out instead of rerunning them")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--with-kills", action="store_true", help="run bench/reliability_kills.py first (long)")
    ap.add_argument("--with-disk", action="store_true", help="run bench/reliability_kills.py --disk-only first")
    ap.add_argument("--with-stage-faults", action="store_true", help="run bench/reliability_faults.py first")
    args = ap.parse_args()
    siblings = [[ROOT / "bench" / "reliability_kills.py", "--disk-only"] if args.with_disk else None,
                [ROOT / "bench" / "reliability_faults.py"] if args.with_stage_faults else None,
                [ROOT / "bench" / "reliability_kills.py"] if args.with_kills else None]
    for cmd in filter(None, siblings):
        subprocess.run([sys.executable, *map(str, cmd), "--out", str(args.out)], check=True)
    earlier = json.loads(args.out.read_text()) if args.out.exists() else {}
    measured = Measurement()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "load").mkdir()
        (tmp / "faults").mkdir()
        loaders = {"retriever": load, "llm": load_llm, "service": load_service, "service_haris": load_service_haris}
        load_result = dict(earlier.get("load", {}))  # servers not loaded this time keep their figures
        for name in args.servers.split(","):
            (tmp / "load" / name).mkdir()
            load_result[name] = loaders[name](args, tmp / "load" / name) | {"commit": measured.git["commit"],
                                                                            "measured": measured.record()}
        if args.faults:
            fault_result, secret_result = faults(args.fault_records, tmp / "faults")
        else:
            fault_result, secret_result = {}, earlier.get("secrets", {}).get("bench", {})
        fuzz_result = fuzz(tmp) if args.fuzz else earlier.get("fuzz", {"skipped": "--no-fuzz"})
    # the per-stage fault runs of bench/reliability_faults.py, kept; this run's client figures replace theirs
    stage_faults = {k: v for k, v in earlier.get("faults", {}).items() if k not in fault_result}
    fault_result = {**stage_faults, **fault_result}
    lost = sum(v.get("records_lost", 0) for v in fault_result.values() if isinstance(v, dict))
    result = {
        "load": load_result,
        "faults": fault_result,
        "secrets": {"bench": secret_result,
                    "tests": ["tests/test_secrets.py (teacher Prefect run; serve-retriever session)",
                              "tests/test_servers.py (bind rule of serve, serve-llm, serve-retriever)"]},
        "fuzz": fuzz_result,
        "kills": earlier.get("kills", {"not_measured": "run bench/reliability_kills.py (or --with-kills)"}),
        "disk": earlier.get("disk", {"not_measured": "run bench/reliability_kills.py --disk-only (or --with-disk)"}),
        "soak": earlier.get("soak", {"not_measured": "run python -m bench.soak_service"}),
        "records_lost": lost,
        "commit": measured.git["commit"],
    }
    out = measured.write(result, args.out)
    print(json.dumps({k: out[k] for k in ("records_lost", "commit")}, indent=1))
    for name in args.servers.split(","):
        print(name, json.dumps(out["load"][name]["wave"], indent=1))
    return out


if __name__ == "__main__":
    main()
