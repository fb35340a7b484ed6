"""The batching worker: a batch gathers while claims keep joining, up to its size or its time cap."""

from __future__ import annotations

import time

from factrl.service.jobs import BatchWorker, ClaimItem, JobStore
from factrl.testing.service_fakes import FakeVerifier


def _trickle(worker: BatchWorker, store: JobStore, n: int, gap_s: float) -> list:
    jobs = []
    for i in range(n):
        job = store.create("demo", [ClaimItem(0, "0", f"claim {i} is true")])
        worker.submit(job)
        jobs.append(job)
        time.sleep(gap_s)
    return jobs


def _wait(jobs, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(j.done for j in jobs):
        assert time.monotonic() < deadline, "jobs not done"
        time.sleep(0.01)


def test_a_burst_arriving_one_by_one_is_one_batch():
    """Eight claims 150 ms apart (1 s in all) with a 400 ms gap: one batch, though the burst lasts
    longer than the gap (a window fixed at the first claim would have closed after three)."""
    fake, store = FakeVerifier(), JobStore()
    worker = BatchWorker({"demo": fake}, store, batch_size=16, max_wait_s=0.4, max_gather_s=5.0).start()
    try:
        jobs = _trickle(worker, store, 8, 0.15)
        _wait(jobs)
    finally:
        worker.stop()
    assert [len(c) for c in fake.calls] == [8]


def test_a_steady_trickle_is_cut_at_max_gather():
    fake, store = FakeVerifier(), JobStore()
    worker = BatchWorker({"demo": fake}, store, batch_size=16, max_wait_s=0.4, max_gather_s=0.6).start()
    try:
        jobs = _trickle(worker, store, 8, 0.15)
        _wait(jobs)
    finally:
        worker.stop()
    assert len(fake.calls) >= 2 and sum(map(len, fake.calls)) == 8
    assert len(fake.calls[0]) <= 6  # closed by the cap, not by the gap


def test_a_full_batch_closes_at_once():
    fake, store = FakeVerifier(), JobStore()
    worker = BatchWorker({"demo": fake}, store, batch_size=4, max_wait_s=5.0, max_gather_s=10.0).start()
    try:
        started = time.monotonic()
        jobs = _trickle(worker, store, 4, 0.0)
        _wait(jobs)
        assert time.monotonic() - started < 4.0
    finally:
        worker.stop()
    assert [len(c) for c in fake.calls] == [4]
