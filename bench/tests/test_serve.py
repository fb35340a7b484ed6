"""bench/serve.py's measuring parts against a real HTTP service over a fake verifier: concurrent
single-claim requests and one batch job, their latencies read from the results stream, the ratio."""

from __future__ import annotations

from bench import serve
from factrl.testing.servers import running_app
from factrl.testing.service_fakes import FakeVerifier, app_of, make_service


def test_concurrent_requests_and_one_batch_are_timed_from_the_stream(tmp_path):
    fake = FakeVerifier(delay=0.5)
    svc = make_service(tmp_path, {"demo": fake}, batch_size=8, max_wait_ms=500)
    claims = [f"claim {i} is true" for i in range(8)]
    try:
        with running_app(app_of(svc)) as url:
            [single] = serve.sequential(url, claims[:1], 60)
            records, concurrent_s = serve.concurrent(url, claims, 60)
            snap, batch_s = serve.one_batch(url, claims, 60)
    finally:
        svc.worker.stop()
    assert single["latency_s"] >= 0.5 and single["result"]["verdict"] == "SUPPORTS"
    assert [r["result"]["claim"] for r in records] == claims and snap["failed"] == 0
    assert [len(c) for c in fake.calls] == [1, 8, 8]  # the concurrent requests made one batch
    summary = serve.latency_summary(records)
    assert summary["claims"] == 8 and 0.5 <= summary["p50_s"] <= summary["p95_s"] <= summary["max_s"]
    assert summary["batch_sizes"] == [8] * 8
    assert 0.5 <= batch_s and 0.5 <= concurrent_s and batch_s / concurrent_s > 0.3
