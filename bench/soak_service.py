"""Soak of ``factrl serve`` -> the ``soak`` key of bench/results/reliability.json (issue 50).

The real app (``create_app`` over ``start_service``: the bounded claim queue, the job store, the
batching worker) in its own uvicorn process on 127.0.0.1, reached over real HTTP by ``--clients``
concurrent clients until ``--warmup`` + ``--requests`` requests have been answered. Each client loops:

* ``POST /v1/verify`` one claim;
* a 200: every ``--follow-every``-th accepted job's ``results.jsonl`` is read to its end, which must be
  exactly one result with the claim's verdict; the others are left to run (a client that fires and
  forgets, as a flood does);
* a 503: it must carry ``Retry-After`` (whole seconds, >= 1); the client waits that long (at most
  ``--max-backoff``) before its next request;
* anything else is an ``error``; no answer within ``--timeout`` s is ``hung``.

Once the last answer is in, the queue must drain: ``lost`` = jobs accepted minus claims the worker ran
(``/healthz`` ``claims_run``, one claim per job) plus followed jobs that ended without their result.
The server's resident memory (``VmRSS`` of its process) is sampled every ``--sample-s`` seconds:
``rss_start_mb`` when the warm-up ends (by then the job store holds its ``max_jobs`` finished jobs),
``rss_end_mb`` after the drain; flat means ``growth_pct`` under 5.

``--verifier fake`` (default, key ``soak.service``): :class:`factrl.testing.service_fakes.FakeVerifier`,
``--delay`` s per batched call, so what is measured is the server. ``--verifier real`` (key
``soak.service_real``): ``factrl serve`` itself over SmolLM2-135M as both agents (the base pair) and a
demo world's BM25 index, a short run (every claim is real model work, so most requests are told to
wait), reported as such.

Usage (nice'd: it keeps both cores busy)::

    nice -n 19 python -m bench.soak_service                       # 3,000 + 20,000 requests, fake verifier
    nice -n 19 python -m bench.soak_service --verifier real --warmup 50 --requests 400 --clients 8

Writes its key into bench/results/reliability.json, leaving the other keys (and the file's ``measured``
block) as they are; ``soak.<key>.measured`` says when, on what and at which load it ran.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench._measured import Measurement

RESULTS = Path(__file__).parent / "results" / "reliability.json"
KEYS = {"fake": "service", "real": "service_real"}


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (``VmRSS`` of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@dataclass
class Tally:
    """What the clients saw, shared by them (one event loop: no lock needed)."""

    target: int
    sent: int = 0
    finished: int = 0  # requests sent and done with: answered, failed or timed out
    accepted: int = 0
    rejected_503: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    hung: int = 0
    followed: int = 0
    followed_missing: int = 0
    retry_after_bad: int = 0
    retry_after_max: int = 0

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


class Sampler(threading.Thread):
    """Samples the server's RSS every ``every`` s as ``(seconds, requests finished so far, MiB)``."""

    def __init__(self, pid: int, tally: Tally, every: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.tally, self.every = pid, tally, every
        self.samples: list[tuple[float, int, float]] = []
        self.stopped = threading.Event()
        self.t0 = time.monotonic()

    def sample(self) -> float:
        mb = rss_mb(self.pid)
        self.samples.append((round(time.monotonic() - self.t0, 1), self.tally.finished, round(mb, 1)))
        return mb

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            self.sample()


async def follow(http: httpx.AsyncClient, job_id: str, claim: str, tally: Tally) -> None:
    """Read a job's ``results.jsonl`` to its end: one result, for ``claim``, with a verdict."""
    tally.followed += 1
    lines = (await http.get(f"/v1/jobs/{job_id}/results.jsonl")).text.splitlines()
    results = [json.loads(line) for line in lines]
    if len(results) != 1 or results[0].get("claim") != claim or results[0].get("status") != "done":
        tally.followed_missing += 1


async def client(http: httpx.AsyncClient, claims: list[str], tally: Tally, args, warm: asyncio.Event) -> None:
    """One client's loop (see the module docstring) until the target count of requests is sent."""
    accepted_here = 0
    while tally.sent < tally.target:
        i = tally.sent
        tally.sent += 1
        claim = claims[i % len(claims)]
        try:
            answer = await http.post("/v1/verify", json={"claim": claim})
        except httpx.TimeoutException:
            tally.hung += 1
            continue
        except httpx.HTTPError as err:
            tally.error(type(err).__name__)
            continue
        finally:
            tally.finished += 1
            if tally.finished >= args.warmup:
                warm.set()
        if answer.status_code == 200:
            tally.accepted += 1
            accepted_here += 1
            if accepted_here % args.follow_every == 0:
                try:
                    await follow(http, answer.json()["job_id"], claim, tally)
                except httpx.TimeoutException:
                    tally.hung += 1
                    tally.followed_missing += 1
                except httpx.HTTPError as err:
                    tally.error(f"follow {type(err).__name__}")
                    tally.followed_missing += 1
        elif answer.status_code == 503:
            tally.rejected_503 += 1
            header = answer.headers.get("retry-after", "")
            if not header.isdigit() or int(header) < 1:
                tally.retry_after_bad += 1
                continue
            tally.retry_after_max = max(tally.retry_after_max, int(header))
            await asyncio.sleep(min(int(header), args.max_backoff))
        else:
            tally.error(f"HTTP {answer.status_code}")


async def drive(url: str, claims: list[str], tally: Tally, sampler: Sampler, args) -> dict:
    """Run the clients; the RSS at the end of the warm-up and the seconds the measured part took."""
    warm = asyncio.Event()
    marks: dict = {}

    async def mark_warm() -> None:
        await warm.wait()
        marks["rss_start_mb"] = await asyncio.to_thread(sampler.sample)
        marks["t_warm"], marks["accepted_in_warmup"] = time.monotonic(), tally.accepted
        print(f"warm-up done ({tally.finished} answered): RSS {marks['rss_start_mb']:.1f} MiB", flush=True)

    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    async with httpx.AsyncClient(base_url=url, timeout=args.timeout, limits=limits) as http:
        marker = asyncio.create_task(mark_warm())
        await asyncio.gather(*(client(http, claims, tally, args, warm) for _ in range(args.clients)))
        await marker
    marks["measured_seconds"] = time.monotonic() - marks.pop("t_warm")
    return marks


def drain(url: str, before: dict, timeout: float) -> dict:
    """``/healthz`` once the queue is empty and no job is unfinished (or ``timeout`` s have passed)."""
    deadline = time.monotonic() + timeout
    while True:
        health = httpx.get(f"{url}/healthz", timeout=30).json()
        if (health["queued"] == 0 and health["jobs_unfinished"] == 0) or time.monotonic() > deadline:
            return health | {"claims_run_during": health["claims_run"] - before["claims_run"]}
        time.sleep(0.5)


def fake_server(args, root: Path) -> tuple[list[str], str]:
    """The command serving the app over the fake verifier; claims it answers SUPPORTS."""
    cmd = [sys.executable, "-m", "factrl.testing.service_fakes", "--port", str(args.port), "--dir", str(root),
           "--delay", str(args.delay), "--batch-size", str(args.batch_size),
           "--max-queued-claims", str(args.max_queued_claims), "--max-jobs", str(args.max_jobs)]
    claims = [f"Claim {i}: Orsa was founded by Ilse Parrow, which is true." for i in range(512)]
    return claims, cmd


def real_server(args, root: Path) -> tuple[list[str], list[str]]:
    """``factrl serve`` over SmolLM2-135M (both agents) and a demo world's BM25 index; its claims."""
    import yaml

    from bench._world import demo_world
    from factrl.data.params import WorldParams

    table, index_dir = demo_world(root / "world", WorldParams(seed=5, num_passages=2000, num_claims=64, hops=(2, 3)))
    params = root / "params.yaml"
    params.write_text(yaml.safe_dump({
        "model": {"base": "smollm2-135m"},
        "serve": {"port": args.port, "index": str(index_dir), "retrieval_mode": "bm25", "device": "cpu",
                  "precision": "fp32", "max_turns": 2, "max_new_tokens": 48, "batch_size": args.batch_size,
                  "max_queued_claims": args.max_queued_claims, "max_claims_per_job": args.max_queued_claims,
                  "max_jobs": args.max_jobs, "checkpoints": [{"name": "base", "reason": "base", "search": "base"}],
                  "corrections_db": str(root / "corrections.sqlite")}}))
    return [c["claim"] for c in table.to_pylist()], [sys.executable, "-m", "factrl.cli", "serve", "--params", str(params)]


def soak(args, root: Path) -> dict:
    """Serve, drive, drain, sample: the ``soak.<key>`` record (see the module docstring)."""
    from factrl.servers import free_port, spawn

    args.port = free_port()
    url = f"http://127.0.0.1:{args.port}"
    claims, cmd = (fake_server if args.verifier == "fake" else real_server)(args, root)
    with spawn(cmd, f"{url}/healthz", timeout=600, name="factrl serve", log_path=root / "serve.log") as proc:
        before = httpx.get(f"{url}/healthz", timeout=30).json()
        tally = Tally(target=args.warmup + args.requests)
        sampler = Sampler(proc.pid, tally, args.sample_s)
        sampler.sample()
        sampler.start()
        started = time.monotonic()
        marks = asyncio.run(drive(url, claims, tally, sampler, args))
        after = drain(url, before, args.drain_timeout)
        sampler.stopped.set()
        sampler.join()
        rss_end = sampler.sample()
        alive = proc.poll() is None
        seconds = time.monotonic() - started
    measured_samples = [mb for _, finished, mb in sampler.samples if finished >= args.warmup]
    lost = tally.accepted - after["claims_run_during"] + tally.followed_missing
    return {
        "verifier": args.verifier,
        "server": (f"factrl serve's app over a fake verifier ({args.delay} s per batched call, batch {args.batch_size})"
                   if args.verifier == "fake" else
                   "factrl serve over SmolLM2-135M as both agents (base pair), a demo world's BM25 index, "
                   f"max_turns 2, max_new_tokens 48, batch {args.batch_size}, fp32 on CPU: a short run"),
        "requests": tally.finished, "warmup_requests": args.warmup, "accepted_in_warmup": marks["accepted_in_warmup"],
        "accepted": tally.accepted,
        "rejected_503": tally.rejected_503, "errors": sum(tally.errors.values()) + tally.retry_after_bad,
        "errors_by_kind": tally.errors, "retry_after_missing_or_bad": tally.retry_after_bad,
        "retry_after_max_s": tally.retry_after_max, "hung": tally.hung, "lost": lost,
        "followed": tally.followed, "followed_missing": tally.followed_missing,
        "claims_run": after["claims_run_during"], "batches": after["batches"] - before["batches"],
        "jobs_held_after": after["jobs"], "queued_after": after["queued"],
        "rss_start_mb": round(marks["rss_start_mb"], 1), "rss_end_mb": round(rss_end, 1),
        "rss_max_after_warmup_mb": round(max(measured_samples + [rss_end]), 1),
        "rss_growth_pct": round(100 * (rss_end - marks["rss_start_mb"]) / marks["rss_start_mb"], 2),
        "rss_samples": sampler.samples[:: max(1, len(sampler.samples) // 60)],
        "seconds": round(seconds, 1), "requests_per_s_after_warmup": round(args.requests / marks["measured_seconds"], 1),
        "server_alive_after": alive,
        "settings": {"clients": args.clients, "batch_size": args.batch_size, "max_queued_claims": args.max_queued_claims,
                     "max_jobs": args.max_jobs, "follow_every": args.follow_every, "max_backoff_s": args.max_backoff,
                     "timeout_s": args.timeout},
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifier", choices=sorted(KEYS), default="fake")
    ap.add_argument("--requests", type=int, default=20_000, help="requests after the warm-up")
    ap.add_argument("--warmup", type=int, default=3000, help="requests before rss_start_mb is taken")
    ap.add_argument("--clients", type=int, default=64)
    # 0.5 s a batch of 16 (32 claims/s) is still fast beside HARIS, and slower than 64 clients send,
    # so the queue fills and the 503 path is soaked too, not only the accepted one
    ap.add_argument("--delay", type=float, default=0.5, help="fake verifier: seconds per batched call")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-queued-claims", type=int, default=64, help="serve.max_queued_claims of the soaked server")
    ap.add_argument("--max-jobs", type=int, default=1000, help="serve.max_jobs of the soaked server")
    ap.add_argument("--follow-every", type=int, default=8, help="read every Nth accepted job's results")
    ap.add_argument("--max-backoff", type=float, default=1.0, help="longest wait after a 503, seconds")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a request counts as hung")
    ap.add_argument("--sample-s", type=float, default=0.5)
    ap.add_argument("--drain-timeout", type=float, default=600.0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    measured = Measurement()
    with tempfile.TemporaryDirectory(prefix="factrl-soak-") as tmp:
        got = soak(args, Path(tmp))
    got |= {"commit": measured.git["commit"], "measured": measured.record()}
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.setdefault("soak", {})[KEYS[args.verifier]] = got
    measured.write(result, args.out)  # the file's measured block: its latest writer's, as the other keys' scripts do
    print(json.dumps({k: v for k, v in got.items() if k not in ("rss_samples", "measured")}, indent=1))
    return got


if __name__ == "__main__":
    main()
