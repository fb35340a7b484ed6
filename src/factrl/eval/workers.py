"""An evaluation's system runs side by side: worker processes, one torch thread each (``evaluate.workers``).

A local engine decodes a 135M model at most 32 rows at a time, and at those sizes a second intra-op
thread buys little: on 2 AVX2 cores (fp32) the HARIS (base) pair over 40 demo claims took 186.6 s
for two pairs one after the other on 2 threads, 143 s side by side in two Python threads of one
process (the GIL holds the engines' Python work) and 128 s in two processes of one thread each
(1.45x). So the evaluation plans every run it will make (each system on each eval set's sample, and
each calibrated checkpoint on the dev claims) as a :class:`RunJob`, runs them in ``workers``
processes, longest first, and hands the results to the runner and the calibration in place of
running them there (:class:`Prefetched`). A worker loads each model once, from the system's model
specs (``ModelSystem.specs``), and reopens the retriever from its index (``Retriever.__reduce__``);
greedy decoding on one thread makes a run's verdicts independent of which worker ran it.

``workers: 1``, a system built from LLM objects rather than specs, or a model loader that cannot be
pickled (tests' scripted LLMs) runs in the calling process, as before.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import logging
import multiprocessing
import os
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from factrl.agents.systems_registry import ClaimRun
from factrl.eval.systems import ModelSystem, System, free_engine_memory, run_system

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunJob:
    """One system over one list of claims, searched with ``retriever`` (as :func:`run_system`)."""

    system: System
    claims: tuple[str, ...]
    retriever: Any
    batch_size: int

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        return self.system.name, self.claims

    @property
    def cost(self) -> int:
        """Relative cost, for longest-first scheduling: claims times the turns a pair system may take."""
        pair = getattr(self.system, "pair", False)
        return len(self.claims) * (2 * getattr(self.system, "max_turns", 1) if pair else 1)


RunFn = Callable[[System, list[str], Any, int], tuple[list[ClaimRun], float]]


def run_here(system: System, claims: list[str], retriever, batch_size: int) -> tuple[list[ClaimRun], float]:
    """A run in this process: its runs and seconds; the system's engine caches freed after it."""
    t0 = time.perf_counter()
    runs = run_system(system, claims, retriever, batch_size)
    free_engine_memory(system)
    return runs, time.perf_counter() - t0


class Prefetched:
    """A :data:`RunFn` that answers the planned runs from what the workers returned and runs any
    other in this process (a plan that missed a run costs time, never a result)."""

    def __init__(self, done: dict) -> None:
        self.done = done

    def __call__(self, system: System, claims: list[str], retriever, batch_size: int):
        found = self.done.pop((system.name, tuple(claims)), None)
        if found is None:
            log.warning("evaluate: %s on %d claims was not planned for the workers; run here", system.name,
                        len(claims))
            return run_here(system, claims, retriever, batch_size)
        return found


def can_send(system: System) -> bool:
    """Whether a worker process can rebuild ``system``: a model system built from model specs."""
    return isinstance(system, ModelSystem) and len(system.specs) == len(system.llms)


def prefetch(jobs: Sequence[RunJob], workers: int, load_llm: Callable[[str], Any]) -> RunFn:
    """Run ``jobs`` in ``workers`` processes (``load_llm``, picklable, loads a spec there) and return
    the :data:`RunFn` that answers them; :func:`run_here` itself where there is nothing to gain
    (``workers`` <= 1, or fewer than two jobs a worker can take)."""
    sendable = [j for j in jobs if can_send(j.system)]
    if workers <= 1 or len(sendable) < 2:
        return run_here
    try:
        pickle.dumps(load_llm)
    except (pickle.PicklingError, AttributeError, TypeError):  # a caller's local function (tests' fakes)
        log.info("evaluate: the model loader cannot go to a worker process; every run in this one")
        return run_here
    workers = min(workers, len(sendable))
    threads = max(1, (os.cpu_count() or 1) // workers)
    log.info("evaluate: %d runs in %d worker processes, %d torch thread(s) each", len(sendable), workers, threads)
    done: dict = {}
    # each retriever goes to a worker once, when it starts (it reopens the index there), not per job
    slot = {id(j.retriever): j.retriever for j in sendable}  # retriever id -> the retriever, first seen first
    index = {key: i for i, key in enumerate(slot)}
    retrievers = list(slot.values())
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked torch thread pools
    with cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start_worker,
                                initargs=(threads, load_llm, retrievers)) as pool:
        futures = {pool.submit(_run_job, _without_models(j.system), j.claims,
                               index[id(j.retriever)], j.batch_size): j
                   for j in sorted(sendable, key=lambda j: -j.cost)}
        for future in cf.as_completed(futures):
            job = futures[future]
            done[job.key] = future.result()
            log.info("%s on %d claims in %.1f s (worker)", job.system.name, len(job.claims), done[job.key][1])
    return Prefetched(done)


def _without_models(system: System) -> ModelSystem:
    """What goes to a worker: the system without its loaded models (the worker loads its specs)."""
    assert isinstance(system, ModelSystem)  # can_send checked it
    return dataclasses.replace(system, llm=None, search_llm=None)


# ---- in the worker process ----------------------------------------------------------------------

_WORKER: dict = {}


def _start_worker(threads: int, load_llm: Callable[[str], Any], retrievers: list) -> None:
    import torch

    torch.set_num_threads(threads)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    _WORKER.update(load=load_llm, models={}, retrievers=retrievers)


def _run_job(system: ModelSystem, claims: tuple[str, ...], retriever: int, batch_size: int
             ) -> tuple[list[ClaimRun], float]:
    """One job in a worker: the system's models loaded once per worker, its runs and seconds."""
    models = _WORKER["models"]
    for spec in system.specs:
        if spec not in models:
            models[spec] = _WORKER["load"](spec)
    llms = [models[spec] for spec in system.specs]
    system = dataclasses.replace(system, llm=llms[0], search_llm=llms[1] if len(llms) > 1 else None)
    return run_here(system, list(claims), _WORKER["retrievers"][retriever], batch_size)
