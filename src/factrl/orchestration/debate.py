"""The claim fan-out of stage `debate` as a Prefect flow.

Claims are cut into batches; each batch runs SC-MAKS's generation phase and debate rounds as one
Prefect task of :func:`factrl.orchestration.fanout.fan_out` (a checkpoint per batch; inside it, one per phase), with
every member's calls behind the on-disk LLM cache. A killed run resumes: finished batches come from
their checkpoints, finished phases of the unfinished batch from theirs, and the calls of its
unfinished phase that did complete from the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from factrl.orchestration.fanout import Work, fan_out


@flow(name="factrl-debate", persist_result=False, log_prints=True)
def debate_flow(batches: list[list[dict]], work: Work, checkpoints: list[str], retries: int) -> list[dict]:
    """Every batch's record (its transcript rows and phase costs), in batch order."""
    return fan_out(batches, work, checkpoints, task_name="debate-batch", retries=retries, desc="debated claims",
                   unit="claim")


def run_debate_batches(batches: Sequence[list[dict]], work: Work, checkpoints: Sequence[str | Path], *,
                       concurrency: int, retries: int) -> list[dict]:
    """Run :func:`debate_flow` on a pool of ``concurrency`` threads."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    flow_fn = debate_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=concurrency))
    return flow_fn([list(b) for b in batches], work, [str(p) for p in checkpoints], retries=retries)
