"""The teacher fan-out of stage `synthesize` as a Prefect flow.

Teacher items are cut into batches; each batch is one Prefect task (thread pool of ``concurrency``
workers, retries on I/O errors only, result persistence off). A batch first looks for its
checkpoint file and, when absent, asks the teacher through ``factrl.llm.signatures.pseudo_answers``
behind the on-disk LLM cache (:class:`~factrl.llm.cache.CachedLLM`), then writes the checkpoint
atomically. A run killed half-way therefore loses no finished batch, and the rerun asks the
teacher nothing it already answered: finished batches come from their checkpoints, and calls of an
unfinished batch that did complete come from the cache.

Checkpoint names hash the teacher model, the prompt and the batch's items, so a changed input
never picks up a stale answer. Tokens, calls and cost are summed over the batches that called.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.task_runners import ThreadPoolTaskRunner
from tqdm import tqdm

from factrl.data.synthesis import item_key
from factrl.io import write_json
from factrl.llm.base import Completion, SamplingParams, call_each
from factrl.llm.cache import CachedLLM, DiskCache

AnswerFn = Callable[..., list]  # (llm, items, *, retries) -> list[PseudoAnswer]


class CountingLLM:
    """Pass-through LLM that counts the requests and tokens that actually reach the backend."""

    def __init__(self, inner):
        self.inner = inner
        self.model_name = inner.model_name
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._lock = threading.Lock()

    def chat(self, conversations, params: SamplingParams, on_result=None) -> list[list[Completion]]:
        """Counts each request that reached the backend, also when a later one of the batch fails."""

        def count(i: int, comps: list[Completion]) -> None:
            with self._lock:
                self.calls += 1
                # a request's prompt is counted once, whatever its n
                self.prompt_tokens += comps[0].prompt_tokens if comps else 0
                self.completion_tokens += sum(c.completion_tokens for c in comps)
            if on_result is not None:
                on_result(i, comps)

        return call_each(self.inner.chat, conversations, params, count)

    def complete_tokens(self, prompts, params: SamplingParams) -> list[list[Completion]]:
        return self.inner.complete_tokens(prompts, params)


def _transient(task, task_run, state) -> bool:
    """Retry a batch only on I/O failures (connection, timeout); a logic error fails at once."""
    try:
        state.result()
    except (OSError, TimeoutError, ConnectionError):
        return True
    except Exception as exc:  # noqa: BLE001 - classified by type name below
        import openai

        return isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError))
    return False


def batch_key(model: str, prompt_hash: str, items: Sequence[dict]) -> str:
    """What a batch's answers depend on: the teacher model, the prompt and the items."""
    h = hashlib.sha256(f"{model}\n{prompt_hash}\n".encode())
    for it in items:
        h.update(item_key(it).encode())
    return h.hexdigest()[:20]


@task(name="teacher-batch", task_run_name="batch-{index}", persist_result=False, cache_policy=NO_CACHE,
      retry_condition_fn=_transient, retry_delay_seconds=2)
def answer_batch(index: int, items: list[dict], teacher, cache_path: str, checkpoint: str,
                 answer_fn: AnswerFn, signature_retries: int) -> dict:
    """Answer one batch (or read its checkpoint); returns the checkpoint record."""
    path = Path(checkpoint)
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8")) | {"resumed": True}
    counting = CountingLLM(teacher)
    cached = CachedLLM(counting, DiskCache(cache_path))
    answers = answer_fn(cached, items, retries=signature_retries)
    if len(answers) != len(items):
        raise RuntimeError(f"batch {index}: teacher returned {len(answers)} answers for {len(items)} items")
    record = {
        "index": index,
        "answers": [dataclasses.asdict(a) for a in answers],
        "calls": counting.calls,
        "cache_hits": cached.hits,
        "prompt_tokens": counting.prompt_tokens,
        "completion_tokens": counting.completion_tokens,
    }
    write_json(record, path)
    return record | {"resumed": False}


@flow(name="factrl-synthesize", persist_result=False, log_prints=True)
def teach_flow(items: list[dict], teacher, *, prompt_hash: str, cache_path: str, checkpoint_dir: str,
               batch_size: int, answer_fn: AnswerFn, signature_retries: int, retries: int) -> list[dict]:
    """Fan the items out in batches; return every batch's record in batch order.

    Every batch runs to completion or failure before the flow returns, so a failure in one never
    costs the work of another; failed batches are then reported together.
    """
    batches = [items[i : i + batch_size] for i in range(0, len(items), batch_size)]
    ckpt = Path(checkpoint_dir)
    ckpt.mkdir(parents=True, exist_ok=True)
    run = answer_batch.with_options(retries=retries)
    futures = {}
    for i, batch in enumerate(batches):
        path = ckpt / f"batch-{i:05d}-{batch_key(teacher.model_name, prompt_hash, batch)}.json"
        fut = run.submit(i, batch, teacher, cache_path, str(path), answer_fn, signature_retries)
        futures[fut] = i
    records: dict[int, dict] = {}
    errors: dict[int, BaseException] = {}
    with tqdm(total=len(items), desc="teacher answers", unit="q") as bar:
        for fut in as_completed(list(futures)):
            i = futures[fut]
            try:
                records[i] = fut.result()
            except Exception as exc:  # noqa: BLE001 - collected and re-raised below
                errors[i] = exc
            bar.update(len(batches[i]))
    if errors:
        first = min(errors)
        raise TeacherBatchError(sorted(errors), errors[first])
    return [records[i] for i in range(len(batches))]


class TeacherBatchError(RuntimeError):
    """Some teacher batches failed; the finished ones are checkpointed and a rerun resumes."""

    def __init__(self, failed: list[int], first: BaseException):
        super().__init__(f"{len(failed)} teacher batch(es) failed {failed[:10]}; first error: "
                         f"{type(first).__name__}: {first}")
        self.failed = failed


def run_teacher(items: list[dict], teacher, *, prompt_hash: str, cache_path: str | Path,
                checkpoint_dir: str | Path, batch_size: int = 8, concurrency: int = 4,
                answer_fn: AnswerFn | None = None, signature_retries: int = 2, retries: int = 2,
                answer_type: type | None = None) -> tuple[list[Any], dict]:
    """Answer ``items`` with ``teacher``; return ``(answers in item order, usage summary)``.

    ``answer_fn`` defaults to ``factrl.llm.signatures.pseudo_answers``; answers are rebuilt as
    ``answer_type`` (default ``signatures.PseudoAnswer``) from the checkpoint records.
    """
    if answer_fn is None or answer_type is None:
        from factrl.llm import signatures

        answer_fn = answer_fn or signatures.pseudo_answers
        answer_type = answer_type or signatures.PseudoAnswer
    if batch_size < 1 or concurrency < 1:
        raise ValueError(f"batch_size and concurrency must be >= 1, got {batch_size}, {concurrency}")
    if not items:
        return [], _usage([])
    flow_fn = teach_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=concurrency))
    records = flow_fn(items, teacher, prompt_hash=prompt_hash, cache_path=str(cache_path),
                      checkpoint_dir=str(checkpoint_dir), batch_size=batch_size, answer_fn=answer_fn,
                      signature_retries=signature_retries, retries=retries)
    answers = [answer_type(**a) for r in records for a in r["answers"]]
    return answers, _usage(records)


def _usage(records: list[dict]) -> dict:
    fresh = [r for r in records if not r.get("resumed")]
    return {
        "batches": len(records),
        "batches_resumed": len(records) - len(fresh),
        "teacher_calls": sum(r["calls"] for r in fresh),
        "cache_hits": sum(r["cache_hits"] for r in fresh),
        "prompt_tokens": sum(r["prompt_tokens"] for r in fresh),
        "completion_tokens": sum(r["completion_tokens"] for r in fresh),
    }
