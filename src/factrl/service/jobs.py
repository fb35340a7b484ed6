"""Jobs and the one worker that batches every claim in flight through the verifier.

A request becomes a :class:`Job` of one or more claims. Its claims go onto one queue shared by all
jobs; a single worker thread (:class:`BatchWorker`) takes the first waiting claim and lets others join
while they keep coming: the batch closes at ``batch_size`` claims, when no claim has joined for
``max_wait_s``, or ``max_gather_s`` after its first claim. It then runs them in one call of the
checkpoint's verifier (one per checkpoint present in the batch). The gap, not a fixed window from the
first claim, is what a burst needs: sixteen requests sent at once reach the queue over a few hundred
milliseconds on a busy machine (each is parsed by the one event loop), and a 50 ms window from the
first closed after three of them, so the burst ran as two or three batches (measured:
bench/serve.py). While a batch runs, the next one
gathers, so ten concurrent single-claim requests cost about one batch of ten. The worker owns the
engines: they are never called from two threads.

A batch that raises is retried claim by claim, so a claim whose model call fails is marked
``failed`` with its error and the others still get their verdicts.

Nothing here grows with the number of requests served. The queue holds at most ``max_queued`` claims:
a job that does not fit is refused whole (:class:`QueueFull`, a 503 with ``Retry-After``), so a flood
of requests is told to wait instead of growing memory until the process dies. Every job not finished
has a claim waiting in the queue or running in the batch, so unfinished jobs number at most
``max_queued + batch_size``; finished ones beyond ``max_jobs`` are dropped oldest first. The worker
counts its batches (:class:`BatchStats`) and keeps only the last few, for ``/healthz`` and the
``Retry-After`` estimate.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Verifier(Protocol):
    """What the worker runs: one result dict per claim (``factrl.service.engine.HarisVerifier``)."""

    def verify(self, claims: list[str]) -> list[dict]:
        ...


@dataclass(frozen=True)
class ClaimItem:
    """One claim of a job: ``id`` (the caller's, or its position), and for a claim cut from a text
    its offsets there (``start``, ``end``)."""

    index: int
    id: str
    claim: str
    start: int | None = None
    end: int | None = None


@dataclass
class Job:
    """A request's claims and the results finished so far (``results`` by claim index; ``order``:
    the indices in the order they finished)."""

    id: str
    checkpoint: str
    items: list[ClaimItem]
    text: str | None = None
    created: float = field(default_factory=time.time)
    results: dict[int, dict] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    finished: float | None = None

    @property
    def total(self) -> int:
        return len(self.items)

    @property
    def done(self) -> bool:
        return len(self.results) == self.total

    def progress(self) -> dict:
        failed = sum(1 for r in self.results.values() if r.get("status") == "failed")
        return {"job_id": self.id, "status": "done" if self.done else "running", "checkpoint": self.checkpoint,
                "total": self.total, "done": len(self.results), "failed": failed}

    def snapshot(self) -> dict:
        """Progress, the claims (with offsets for a text), and the results finished so far in claim order."""
        return self.progress() | {
            "text": self.text,
            "claims": [{"index": i.index, "id": i.id, "claim": i.claim, "start": i.start, "end": i.end}
                       for i in self.items],
            "results": [self.results[i] for i in sorted(self.results)],
        }


class JobStore:
    """Jobs by id, in memory. Once more than ``max_jobs`` jobs have finished, the oldest finished one
    is dropped as each new one finishes (in finishing order, O(1)); unfinished jobs are bounded by
    the worker's queue (see the module docstring), never by dropping a job a client waits on."""

    def __init__(self, max_jobs: int = 1000) -> None:
        self.max_jobs = max_jobs
        self.jobs: dict[str, Job] = {}
        self.finished: OrderedDict[str, None] = OrderedDict()  # finished job ids, oldest first
        self.lock = threading.Lock()

    def create(self, checkpoint: str, items: list[ClaimItem], text: str | None = None) -> Job:
        job = Job(uuid.uuid4().hex, checkpoint, items, text)
        with self.lock:
            self.jobs[job.id] = job
        return job

    def discard(self, job: Job) -> None:
        """Forget a job that never ran (the worker refused it)."""
        with self.lock:
            self.jobs.pop(job.id, None)
            self.finished.pop(job.id, None)

    def get(self, job_id: str) -> Job | None:
        with self.lock:
            return self.jobs.get(job_id)

    @property
    def unfinished(self) -> int:
        with self.lock:
            return len(self.jobs) - len(self.finished)

    def record(self, job: Job, index: int, result: dict) -> None:
        with self.lock:
            job.results[index] = result
            job.order.append(index)
            if job.done and job.finished is None:
                job.finished = time.time()
                if job.id in self.jobs:  # not discarded meanwhile
                    self.finished[job.id] = None
                while len(self.finished) > self.max_jobs:
                    old, _ = self.finished.popitem(last=False)
                    self.jobs.pop(old, None)

    def finished_since(self, job: Job, position: int) -> list[dict]:
        """Results that finished after the first ``position`` ones, in finishing order."""
        with self.lock:
            return [job.results[i] for i in job.order[position:]]


class QueueFull(RuntimeError):
    """The claim queue cannot take a job's claims: the job is refused whole (nothing of it queued).

    ``retry_after_s``: when it may fit, from the rate the worker has been draining the queue."""

    def __init__(self, claims: int, queued: int, capacity: int, retry_after_s: int) -> None:
        super().__init__(f"the claim queue is full: {queued} claims are waiting and this job's {claims} would "
                         f"pass serve.max_queued_claims ({capacity}); retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


class BatchStats:
    """What the worker has run, in constant memory: batched calls and claims in total, and the last
    ``keep`` batches as ``(checkpoint, claims, seconds)`` (for ``/healthz``, tests and the drain rate)."""

    def __init__(self, keep: int = 64) -> None:
        self.batches = 0
        self.claims = 0
        self.recent: deque[tuple[str, int, float]] = deque(maxlen=keep)

    def add(self, checkpoint: str, claims: int, seconds: float) -> None:
        # one writer (the worker thread); readers see a count at most one batch behind
        self.batches += 1
        self.claims += claims
        self.recent.append((checkpoint, claims, seconds))

    def claims_per_second(self) -> float | None:
        """The recent batches' claims over their seconds; None before the first batch."""
        recent = list(self.recent)  # a copy: the worker may append meanwhile
        seconds = sum(s for _, _, s in recent)
        return sum(c for _, c, _ in recent) / seconds if recent and seconds > 0 else None


RETRY_AFTER_MAX_S = 60  # a longer estimate is no better a promise: the client asks again within a minute


_STOP = object()


class BatchWorker:
    """The thread that runs queued claims in batches (see the module docstring).

    verifiers: by checkpoint name. calibrations: by checkpoint name, objects with ``apply(raw_scores)``
    and ``calibrated`` (``factrl.service.confidence.Calibration``). max_wait_s: the longest gap between
    two claims joining a batch; max_gather_s: the longest a batch gathers (at least ``max_wait_s``),
    so a steady trickle of claims cannot hold the first one back for long. max_queued: the most
    claims waiting in the queue (a job that would pass it raises :class:`QueueFull`). ``stats``
    counts the batched calls (:class:`BatchStats`).
    """

    def __init__(self, verifiers: Mapping[str, Verifier], store: JobStore, *, batch_size: int = 16,
                 max_wait_s: float = 0.05, max_gather_s: float = 1.0, max_queued: int = 10_000,
                 calibrations: Mapping[str, Any] | None = None) -> None:
        self.verifiers = verifiers
        self.store = store
        self.batch_size = batch_size
        self.max_wait_s = max_wait_s
        self.max_gather_s = max(max_gather_s, max_wait_s)
        self.calibrations = dict(calibrations or {})
        self.max_queued = max_queued
        # unbounded as a Queue (stop()'s sentinel must always fit); submit() enforces max_queued
        self.queue: queue.Queue = queue.Queue()
        self.admit = threading.Lock()
        self.stats = BatchStats()
        self.thread = threading.Thread(target=self._run, name="factrl-serve-batcher", daemon=True)

    def start(self) -> BatchWorker:
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.queue.put(_STOP)
        self.thread.join(timeout)

    def submit(self, job: Job) -> None:
        """Queue every claim of ``job``, or none: :class:`QueueFull` when they would pass ``max_queued``."""
        with self.admit:  # only submit() adds and the worker only takes, so the check holds until the puts
            queued = self.queue.qsize()
            if queued + len(job.items) > self.max_queued:
                raise QueueFull(len(job.items), queued, self.max_queued,
                                self.retry_after(queued + len(job.items) - self.max_queued))
            for item in job.items:
                self.queue.put((job, item))

    def retry_after(self, claims: int) -> int:
        """Whole seconds until ``claims`` more claims have left the queue at the recent rate, in
        ``[1, RETRY_AFTER_MAX_S]`` (1 before any batch has run: nothing to estimate from)."""
        rate = self.stats.claims_per_second()
        if rate is None:
            return 1
        return max(1, min(RETRY_AFTER_MAX_S, math.ceil(claims / rate)))

    @property
    def queued(self) -> int:
        return self.queue.qsize()

    def _gather(self, first) -> tuple[list, bool]:
        """``first`` and the claims that join it (see the module docstring); (batch, stop seen)."""
        batch, started = [first], time.monotonic()
        closes = started + self.max_gather_s
        deadline = min(started + self.max_wait_s, closes)
        while len(batch) < self.batch_size:
            remaining = deadline - time.monotonic()
            try:
                nxt = self.queue.get(timeout=remaining) if remaining > 0 else self.queue.get_nowait()
            except queue.Empty:
                break
            if nxt is _STOP:
                return batch, True
            batch.append(nxt)
            deadline = min(time.monotonic() + self.max_wait_s, closes)  # another may be on its way
        return batch, False

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self.queue.get()
            if first is _STOP:
                break
            batch, stopping = self._gather(first)
            groups: dict[str, list] = {}
            for job, item in batch:
                groups.setdefault(job.checkpoint, []).append((job, item))
            for checkpoint, group in groups.items():
                try:
                    self._run_group(checkpoint, group)
                except Exception as err:  # never let the worker die: the claims fail, the service goes on
                    log.exception("serve: batch of %d claims on %s failed", len(group), checkpoint)
                    for job, item in group:
                        if item.index not in job.results:
                            self.store.record(job, item.index, self._finish(job, item, failure(item, err)))

    def _run_group(self, checkpoint: str, group: list) -> None:
        verifier = self.verifiers[checkpoint]
        claims = [item.claim for _, item in group]
        try:
            results = self._timed(verifier, checkpoint, claims)
            if len(results) != len(claims):
                raise RuntimeError(f"verifier {checkpoint!r} returned {len(results)} results for {len(claims)} claims")
        except Exception as err:
            if len(group) == 1:
                results = [failure(group[0][1], err)]
            else:  # find the failing claim(s): the others keep their verdicts
                log.warning("serve: a batch of %d claims failed (%s); retrying them one by one", len(group), err)
                results = [self._alone(verifier, checkpoint, item) for _, item in group]
        calibration = self.calibrations.get(checkpoint)
        raw = [r.get("raw_confidence") for r in results]
        groundings = [(r.get("abstention") or {}).get("grounding") for r in results]  # a grounded map reads them
        mapped = calibration.apply(raw, groundings) if calibration is not None else raw
        calibrated = bool(calibration is not None and calibration.calibrated)
        for (job, item), result, confidence in zip(group, results, mapped):
            if result.get("status") != "failed":
                result = result | {"status": "done", "confidence": confidence, "calibrated": calibrated}
            self.store.record(job, item.index, self._finish(job, item, result))

    def _timed(self, verifier: Verifier, checkpoint: str, claims: list[str]) -> list[dict]:
        """One batched call of ``verifier``, counted in ``stats`` whether it returns or raises."""
        started = time.monotonic()
        try:
            return verifier.verify(claims)
        finally:
            self.stats.add(checkpoint, len(claims), time.monotonic() - started)

    def _alone(self, verifier: Verifier, checkpoint: str, item: ClaimItem) -> dict:
        try:
            [result] = self._timed(verifier, checkpoint, [item.claim])
            return result
        except Exception as err:
            return failure(item, err)

    @staticmethod
    def _finish(job: Job, item: ClaimItem, result: dict) -> dict:
        return result | {"index": item.index, "id": item.id, "claim": item.claim, "start": item.start,
                         "end": item.end, "checkpoint": job.checkpoint,
                         "latency_s": round(time.time() - job.created, 4)}


def failure(item: ClaimItem, err: BaseException) -> dict:
    """The result of a claim whose verification raised."""
    return {"status": "failed", "error": f"{type(err).__name__}: {err}", "verdict": None, "confidence": None,
            "raw_confidence": None, "calibrated": False, "citations": [], "trace": None, "usage": None,
            "cost_usd": None}
