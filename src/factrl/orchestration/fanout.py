"""Checkpointed fan-out of independent batches as Prefect tasks: the machinery every stage whose work
splits into batches of LLM calls shares (``synthesize``'s teacher, ``debate``'s claim batches).

Each batch is one Prefect task (retries on I/O errors only, result persistence off). A task first
looks for its checkpoint file and returns it when present; otherwise it runs ``work(index, batch)``
and writes the returned record atomically. A run killed half-way therefore loses no finished batch,
and its rerun does no finished batch's work again. Every batch runs to completion or failure before
:func:`fan_out` returns, so one failure never costs another batch's work; the failures are then
raised together as one :class:`BatchError`.

:func:`fan_out` submits tasks, so it runs inside a flow; a stage's flow sets the thread pool size.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from tqdm import tqdm

from factrl.io import write_json

Work = Callable[[int, list], dict]  # (batch index, batch items) -> a JSON-serialisable record


def transient(task, task_run, state) -> bool:
    """Retry a batch only on I/O failures (connection, timeout); a logic error fails at once."""
    try:
        state.result()
    except (OSError, TimeoutError, ConnectionError):
        return True
    except Exception as exc:  # noqa: BLE001 - classified by type name below
        import openai

        return isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError))
    return False


@task(name="batch", task_run_name="batch-{index}", persist_result=False, cache_policy=NO_CACHE,
      retry_condition_fn=transient, retry_delay_seconds=2)
def checkpointed_batch(index: int, batch: list, work: Work, checkpoint: str) -> dict:
    """Run one batch, or read its checkpoint; the record gains ``resumed`` (whether it was read)."""
    path = Path(checkpoint)
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8")) | {"resumed": True}
    record = work(index, batch)
    write_json(record, path)
    return record | {"resumed": False}


class BatchError(RuntimeError):
    """Some batches failed; the finished ones are checkpointed and a rerun resumes."""

    def __init__(self, failed: list[int], first: BaseException, what: str = "batch"):
        super().__init__(f"{len(failed)} {what}(es) failed {failed[:10]}; first error: "
                         f"{type(first).__name__}: {first}")
        self.failed = failed


def fan_out(batches: Sequence[list], work: Work, checkpoints: Sequence[str | Path], *, task_name: str,
            retries: int, desc: str, unit: str, count: Callable[[list], int] = len) -> list[dict]:
    """Every batch's record, in batch order (call inside a flow).

    ``checkpoints[i]`` is batch i's checkpoint file: name it by a hash of everything the batch's
    result depends on, so a changed input never picks up a stale record. ``count`` sizes the
    progress bar's step per batch (in ``unit``).
    """
    if len(checkpoints) != len(batches):
        raise ValueError(f"{len(batches)} batches but {len(checkpoints)} checkpoint paths")
    run = checkpointed_batch.with_options(name=task_name, retries=retries)
    futures = {run.submit(i, list(b), work, str(p)): i for i, (b, p) in enumerate(zip(batches, checkpoints))}
    records: dict[int, dict] = {}
    errors: dict[int, BaseException] = {}
    with tqdm(total=sum(count(b) for b in batches), desc=desc, unit=unit) as bar:
        for fut in as_completed(list(futures)):
            i = futures[fut]
            try:
                records[i] = fut.result()
            except Exception as exc:  # noqa: BLE001 - collected and re-raised below
                errors[i] = exc
            bar.update(count(batches[i]))
    if errors:
        raise BatchError(sorted(errors), errors[min(errors)], what=task_name)
    return [records[i] for i in range(len(batches))]
