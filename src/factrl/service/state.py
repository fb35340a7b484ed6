"""What ``factrl serve``'s app serves (:class:`Service`), and the one place it is put together from
params (:func:`start_service`): the job store and the batching worker sized by the ``serve`` limits.

The real service (``factrl.service.app.build_service``) and the tests' fake one both start it here,
so a limit added to params reaches both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from factrl.service.corrections import CorrectionStore
from factrl.service.jobs import BatchWorker, JobStore, Verifier
from factrl.service.params import ServeParams


@dataclass
class Service:
    """What the app serves: the worker and verifiers behind it, the job and correction stores, the
    provenance of each checkpoint (``{"checkpoint_hash", "index_hash", "params_hash"}`` by name)."""

    params: ServeParams
    worker: BatchWorker
    store: JobStore
    corrections: CorrectionStore
    provenance: Mapping[str, Mapping[str, str]]
    token: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def checkpoints(self) -> list[str]:
        return list(self.worker.verifiers)


def start_service(params: ServeParams, verifiers: Mapping[str, Verifier], provenance: Mapping[str, Mapping[str, str]],
                  *, token: str | None = None, calibrations: Mapping[str, Any] | None = None,
                  info: dict[str, Any] | None = None) -> Service:
    """A :class:`Service` over ``verifiers`` (by checkpoint name) with its worker started: jobs kept
    and claims queued within ``params``' bounds (``max_jobs``, ``max_queued_claims``)."""
    store = JobStore(params.max_jobs)
    worker = BatchWorker(verifiers, store, batch_size=params.batch_size, max_wait_s=params.max_wait_ms / 1000,
                         max_gather_s=params.max_gather_ms / 1000, max_queued=params.max_queued_claims,
                         calibrations=calibrations).start()
    return Service(params, worker, store, CorrectionStore(params.corrections_db), provenance, token, info or {})
