"""factrl serve holds nothing that grows with the requests it has served (issue 50): a bounded claim
queue that answers 503 with Retry-After, batch counters instead of a list, jobs evicted, exports that
leave no temporary directory, a body refused while it streams in, the routes grouped in routers."""

from __future__ import annotations

import asyncio
import gc
import json
import tempfile
import threading
import time
import tracemalloc

import pytest
from fastapi.testclient import TestClient

from factrl.config import ConfigError
from factrl.service import jobs as jobs_module
from factrl.service.jobs import BatchWorker, ClaimItem, JobStore
from factrl.service.params import ServeParams
from factrl.testing.service_fakes import FakeVerifier, app_of, make_service, wait_done


class GatedVerifier(FakeVerifier):
    """A FakeVerifier whose calls wait until ``gate`` is set; ``entered`` is set once a call waits."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.entered = threading.Event(), threading.Event()

    def verify(self, claims: list[str]) -> list[dict]:
        self.entered.set()
        # long: on a starved machine (nice 19 beside a training run) a test's 100 requests took
        # minutes, and a gate that gave up early let the queue drain under the test's feet
        assert self.gate.wait(900), "the test never opened the gate"
        return super().verify(claims)


def _until(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_full_queue_answers_503_with_retry_after_and_queues_nothing_of_the_refused_job(tmp_path):
    gated = GatedVerifier()
    svc = make_service(tmp_path, {"demo": gated}, batch_size=1, max_wait_ms=0, max_gather_ms=0,
                       max_queued_claims=4, max_claims_per_job=4)
    try:
        client = TestClient(app_of(svc))
        running = client.post("/v1/verify", json={"claim": "first is true"}).json()["job_id"]
        _until(lambda: gated.entered.is_set() and svc.worker.queued == 0)  # the worker holds it, busy
        queued = [client.post("/v1/verify", json={"claim": f"queued {i} is true"}) for i in range(4)]
        assert [a.status_code for a in queued] == [200] * 4 and svc.worker.queued == 4
        jobs_before = len(svc.store.jobs)

        full = client.post("/v1/verify", json={"claim": "one too many"})
        assert full.status_code == 503, full.text
        assert int(full.headers["Retry-After"]) >= 1
        assert "serve.max_queued_claims (4)" in full.json()["detail"]
        batch = "\n".join(json.dumps({"claim": f"c{i}"}) for i in range(2))
        assert client.post("/v1/verify/batch", content=batch).status_code == 503
        # refused whole: nothing queued, no job kept, and the health check says why
        assert svc.worker.queued == 4 and len(svc.store.jobs) == jobs_before
        health = client.get("/healthz").json()
        assert (health["queued"], health["max_queued"], health["jobs_unfinished"]) == (4, 4, 5)

        gated.gate.set()
        for answer in queued:
            wait_done(client, answer.json()["job_id"])
        wait_done(client, running)
        again = client.post("/v1/verify", json={"claim": "room again, true"})
        assert again.status_code == 200 and wait_done(client, again.json()["job_id"])["results"][0]["verdict"] == "SUPPORTS"
    finally:
        gated.gate.set()
        svc.worker.stop()


def test_retry_after_is_the_time_the_queue_needs_to_drain_enough_at_the_recent_rate():
    worker = BatchWorker({}, JobStore(), max_queued=10)
    assert worker.retry_after(5) == 1  # no batch run yet: nothing to estimate from
    worker.stats.add("demo", 10, 2.0)  # 5 claims a second
    assert worker.retry_after(12) == 3 and worker.retry_after(1) == 1
    assert worker.retry_after(10_000) == jobs_module.RETRY_AFTER_MAX_S


def test_the_queue_bound_is_a_checked_param():
    assert ServeParams().max_queued_claims >= ServeParams().max_claims_per_job
    with pytest.raises(ConfigError, match="serve.max_queued_claims"):
        ServeParams(max_queued_claims=10, max_claims_per_job=20)
    with pytest.raises(ConfigError, match="serve.max_queued_claims must be >= 1"):
        ServeParams(max_queued_claims=0, max_claims_per_job=1)


class CountingVerifier:
    """Answers every claim at once; keeps nothing but a count."""

    def __init__(self) -> None:
        self.claims = 0

    def verify(self, claims: list[str]) -> list[dict]:
        self.claims += len(claims)
        return [{"verdict": "SUPPORTS", "raw_confidence": 0.5} for _ in claims]


def _run_batches(worker: BatchWorker, store: JobStore, verifier: CountingVerifier, n: int) -> None:
    """``n`` one-claim jobs, each its own batch (batch size 1), run to the end; no job kept here.
    Submitted in waves of 100, as a queue bound would admit them: a dict keeps the capacity of its
    largest size, so 3,000 jobs submitted at once would measure the dict's peak, not a leak."""
    target = verifier.claims + n
    for start in range(0, n, 100):
        for i in range(start, min(n, start + 100)):
            worker.submit(store.create("demo", [ClaimItem(0, "0", f"claim {i}")]))
        _until(lambda: worker.queued == 0, timeout=600)
    _until(lambda: verifier.claims >= target and worker.queued == 0, timeout=600)
    time.sleep(0.05)  # the last result recorded


def _held_by_jobs_module(snapshot: tracemalloc.Snapshot) -> int:
    return sum(s.size for s in snapshot.filter_traces([tracemalloc.Filter(True, jobs_module.__file__)])
               .statistics("filename"))


def test_the_worker_and_store_hold_the_same_memory_after_thousands_of_batches():
    """Fails on 691c2d1's worker, whose ``batches`` list kept a (checkpoint, size) tuple per batch
    forever: memory allocated in jobs.py and still held grows by ~100 bytes a batch there."""
    verifier, store = CountingVerifier(), JobStore(max_jobs=20)
    worker = BatchWorker({"demo": verifier}, store, batch_size=1, max_wait_s=0.0, max_gather_s=0.0).start()
    tracemalloc.start()
    try:
        _run_batches(worker, store, verifier, 500)  # warm-up: the store and the recent batches fill up
        gc.collect()
        before = _held_by_jobs_module(tracemalloc.take_snapshot())
        _run_batches(worker, store, verifier, 3000)
        gc.collect()
        after = _held_by_jobs_module(tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
        worker.stop()
    assert verifier.claims == 3500 and len(store.jobs) <= 20
    assert after - before < 20_000, f"jobs.py holds {after - before} more bytes after 3,000 more batches"


def test_batch_counters_count_every_call_and_keep_only_the_recent_ones():
    stats = jobs_module.BatchStats(keep=3)
    for size in (1, 2, 3, 4, 5):
        stats.add("demo", size, 0.5)
    assert (stats.batches, stats.claims) == (5, 15)
    assert [c for _, c, _ in stats.recent] == [3, 4, 5] and stats.claims_per_second() == 8.0


def test_finished_jobs_beyond_max_jobs_are_dropped_oldest_first():
    store = JobStore(max_jobs=3)
    made = [store.create("demo", [ClaimItem(0, "0", f"c{i}")]) for i in range(6)]
    for job in made[:5]:
        store.record(job, 0, {"verdict": "SUPPORTS"})
    assert set(store.jobs) == {j.id for j in made[2:]}  # the three newest finished and the unfinished one
    assert store.unfinished == 1
    store.discard(made[5])
    assert made[5].id not in store.jobs


def test_a_flood_keeps_at_most_the_queue_bound_of_unfinished_jobs(tmp_path):
    """100 requests while the verifier is stuck: 6 accepted (1 running, 5 queued), 94 told to retry;
    the store holds the accepted ones only."""
    gated = GatedVerifier()
    svc = make_service(tmp_path, {"demo": gated}, batch_size=1, max_wait_ms=0, max_gather_ms=0,
                       max_queued_claims=5, max_claims_per_job=5)
    try:
        client = TestClient(app_of(svc))
        client.post("/v1/verify", json={"claim": "first"})
        _until(lambda: gated.entered.is_set() and svc.worker.queued == 0)
        codes = [client.post("/v1/verify", json={"claim": f"flood {i}"}).status_code for i in range(99)]
        assert codes.count(200) == 5 and codes.count(503) == 94
        assert len(svc.store.jobs) == 6
    finally:
        gated.gate.set()
        svc.worker.stop()


def test_an_export_leaves_no_temporary_directory(tmp_path, monkeypatch):
    """691c2d1 left one ``factrl-corrections-*`` directory behind per export."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    svc = make_service(tmp_path)
    try:
        client = TestClient(app_of(svc))
        job = wait_done(client, client.post("/v1/verify", json={"claim": "Orsa is true."}).json()["job_id"])
        saved = client.post("/v1/corrections", json={"job_id": job["job_id"], "index": 0,
                                                     "corrected_verdict": "REFUTES", "reviewer": "ana"})
        assert saved.status_code == 200, saved.text
        for fmt in ("parquet", "jsonl", "jsonl"):
            answer = client.get(f"/v1/corrections/export?format={fmt}")
            assert answer.status_code == 200 and answer.content
            assert f'filename="corrections.{fmt}"' in answer.headers["content-disposition"]
    finally:
        svc.worker.stop()
    assert list(temp.iterdir()) == []


def _post_asgi(app, path: str, pieces: list[bytes], headers: list | None = None) -> tuple[int, dict, int]:
    """POST the body ``pieces`` to ``app`` as ASGI messages, one piece each (no Content-Length unless
    in ``headers``, as a chunked upload arrives); (status, JSON answer, pieces the app read)."""
    read, sent = 0, []

    async def receive():
        nonlocal read
        read += 1
        return {"type": "http.request", "body": pieces[read - 1], "more_body": read < len(pieces)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), *(headers or [])],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), read


def test_an_oversized_streamed_body_is_refused_before_the_rest_is_read(tmp_path):
    svc = make_service(tmp_path, max_body_bytes=4000)
    try:
        app = app_of(svc)
        megabyte = [b" " * 1000] * 1000
        # a 1 MB chunked upload: 413 at the fifth 1,000-byte piece, the other 995 never read
        status, answer, read = _post_asgi(app, "/v1/verify", megabyte)
        assert status == 413 and "serve.max_body_bytes (4000)" in answer["detail"] and read == 5
        status, _, read = _post_asgi(app, "/v1/verify/batch", megabyte)
        assert status == 413 and read == 5
        # a declared Content-Length over the limit: refused before a byte is read
        status, _, read = _post_asgi(app, "/v1/verify", megabyte, [(b"content-length", b"1000000")])
        assert status == 413 and read == 0
        # a body just under the limit, in 10-byte pieces, is read whole and verified
        body = json.dumps({"claim": "x is true"}).encode()
        body += b" " * (3990 - len(body))
        pieces = [body[i:i + 10] for i in range(0, len(body), 10)]
        status, answer, read = _post_asgi(app, "/v1/verify", pieces)
        assert status == 200 and read == len(pieces) == 399 and answer["total"] == 1
    finally:
        svc.worker.stop()


OLD_ROUTES = {("GET", "/healthz"), ("GET", "/v1/info"), ("POST", "/v1/verify"), ("POST", "/v1/verify/batch"),
              ("GET", "/v1/jobs/{job_id}"), ("GET", "/v1/jobs/{job_id}/results.jsonl"), ("POST", "/v1/corrections"),
              ("GET", "/v1/corrections"), ("GET", "/v1/corrections/export"), ("GET", "/")}


def test_the_routers_serve_every_route_of_the_one_function_app_and_guard_the_v1_ones(tmp_path):
    svc = make_service(tmp_path, token="t0ken")
    try:
        client = TestClient(app_of(svc))
        spec = client.get("/openapi.json").json()["paths"]
        documented = {(method.upper(), path) for path, methods in spec.items() for method in methods}
        assert OLD_ROUTES - {("GET", "/")} <= documented, OLD_ROUTES - documented
        # each answers: the public ones, and the /v1 ones with a 401 (no token), never a 404
        for method, path in sorted(OLD_ROUTES):
            answer = client.request(method, path.replace("{job_id}", "none"))
            assert answer.status_code == (401 if path.startswith("/v1") else 200), (method, path, answer.status_code)
        assert client.get("/static/app.js").status_code == 200
    finally:
        svc.worker.stop()
