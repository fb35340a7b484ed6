"""A fake verifier and a service around it, for the service's unit tests (no model runs).

As a script, the real ``factrl serve`` app (``create_app``: limits, jobs, the batching worker, result
streams) over a :class:`FakeVerifier` under uvicorn, for the load bench (bench/reliability.py) and the
soak (bench/soak_service.py), where what is measured is the server, not a model::

    python -m factrl.testing.service_fakes --port PORT --dir DIR [--delay 0.05] [--batch-size 16] \
        [--max-queued-claims 2000] [--max-jobs 1000]
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from factrl.service.app import create_app
from factrl.service.params import ServeParams
from factrl.service.state import Service, start_service

PASSAGE = "Orsa is a company. Orsa was founded by Ilse Parrow in Tessik."


class FakeVerifier:
    """Answers SUPPORTS for claims containing 'true', else REFUTES; ``calls`` records every batch
    (unless ``keep_calls`` is False: a server that runs for hours, as in the soak, would otherwise
    grow by the very list it is there to show the service does not keep). A claim containing 'boom'
    makes the whole call raise, as a failing model call would."""

    def __init__(self, delay: float = 0.0, keep_calls: bool = True):
        self.calls: list[list[str]] = []
        self.delay = delay
        self.keep_calls = keep_calls
        self.lock = threading.Lock()

    def verify(self, claims: list[str]) -> list[dict]:
        if self.keep_calls:
            with self.lock:
                self.calls.append(list(claims))
        time.sleep(self.delay)
        if any("boom" in c for c in claims):
            raise RuntimeError("model call failed")
        start = PASSAGE.index("Orsa was")
        citation = {"passage_id": "p1", "title": "Orsa", "quote": PASSAGE[start:], "start": start,
                    "end": len(PASSAGE), "question": "Who founded Orsa?", "report": "Ilse Parrow founded Orsa.",
                    "overlap": 3, "passage_text": PASSAGE}
        return [{"claim": c, "verdict": "SUPPORTS" if "true" in c else "REFUTES", "raw_confidence": 0.75,
                 "citations": [citation], "trace": {"questions": [], "reasoning": ""},
                 "usage": {"model_calls": 2, "tokens_in": 100, "tokens_out": 10, "estimated": False, "by_model": {}},
                 "cost_usd": 0.0, "engine_seconds": self.delay, "batch_size": len(claims)} for c in claims]


class FixedCalibration:
    """A calibration map that halves every raw score."""

    calibrated = True

    def apply(self, raw, groundings=None):
        return [None if r is None else r / 2 for r in raw]


PROVENANCE = {"checkpoint_hash": "aaaa+bbbb", "index_hash": "cccc", "params_hash": "dddd"}


def make_service(tmp_path: Path, verifiers: dict | None = None, *, token: str | None = None, calibrations=None,
                 **params) -> Service:
    """A started service over fake verifiers (default: one FakeVerifier named ``demo``)."""
    verifiers = verifiers or {"demo": FakeVerifier()}
    serve = ServeParams(**({"corrections_db": str(tmp_path / "corrections.sqlite")} | params))
    return start_service(serve, verifiers, {name: PROVENANCE for name in verifiers}, token=token,
                         calibrations=calibrations)


def app_of(service: Service):
    return create_app(service)


def wait_done(client, job_id: str, timeout: float = 20.0, headers=None) -> dict:
    """Poll GET /v1/jobs/{id} until the job is done; its snapshot."""
    deadline = time.monotonic() + timeout
    while True:
        snap = client.get(f"/v1/jobs/{job_id}", headers=headers or {}).json()
        if snap["status"] == "done":
            return snap
        assert time.monotonic() < deadline, f"job not done in {timeout}s: {snap}"
        time.sleep(0.02)


def main(argv: list[str] | None = None) -> None:
    """Serve the app over one FakeVerifier (``--delay`` seconds per batched call) on 127.0.0.1."""
    import argparse

    import uvicorn

    ap = argparse.ArgumentParser(description="factrl serve's app over a fake verifier (load bench)")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dir", type=Path, required=True, help="where the corrections database goes")
    ap.add_argument("--delay", type=float, default=0.05, help="seconds per batched verifier call")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-queued-claims", type=int, default=ServeParams.max_queued_claims)
    ap.add_argument("--max-jobs", type=int, default=ServeParams.max_jobs)
    args = ap.parse_args(argv)
    # no one reads the fake's calls in this process: keeping them would be a leak of the bench's own
    service = make_service(args.dir, {"demo": FakeVerifier(args.delay, keep_calls=False)}, batch_size=args.batch_size,
                           max_queued_claims=args.max_queued_claims, max_jobs=args.max_jobs,
                           max_claims_per_job=min(ServeParams.max_claims_per_job, args.max_queued_claims))
    try:
        uvicorn.run(create_app(service), host="127.0.0.1", port=args.port, log_level="warning")
    finally:
        service.worker.stop()


if __name__ == "__main__":
    main()
