"""The teacher fan-out of stage `synthesize` as a Prefect flow.

Teacher items are cut into batches; each batch is one Prefect task of :func:`factrl.orchestration.fanout.fan_out`
(thread pool of ``concurrency`` workers, retries on I/O errors only, result persistence off). A
batch first looks for its
checkpoint file and, when absent, asks the teacher through ``factrl.signatures.pseudo_answers``
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from factrl.data.synthesis import item_key
from factrl.llm.cache import CachedLLM, DiskCache
from factrl.llm.counting import CountingLLM
from factrl.orchestration.fanout import BatchError, fan_out

AnswerFn = Callable[..., list]  # (llm, items, *, retries) -> list[PseudoAnswer]


def batch_key(model: str, prompt_hash: str, items: Sequence[dict]) -> str:
    """What a batch's answers depend on: the teacher model, the prompt and the items."""
    h = hashlib.sha256(f"{model}\n{prompt_hash}\n".encode())
    for it in items:
        h.update(item_key(it).encode())
    return h.hexdigest()[:20]


def answer_batch(index: int, items: list[dict], teacher, cache_path: str, answer_fn: AnswerFn,
                 signature_retries: int) -> dict:
    """Answer one batch through the disk cache; returns its checkpoint record."""
    counting = CountingLLM(teacher)
    cached = CachedLLM(counting, DiskCache(cache_path))
    answers = answer_fn(cached, items, retries=signature_retries)
    if len(answers) != len(items):
        raise RuntimeError(f"batch {index}: teacher returned {len(answers)} answers for {len(items)} items")
    return {
        "index": index,
        "answers": [dataclasses.asdict(a) for a in answers],
        "calls": counting.calls,
        "cache_hits": cached.hits,
        "prompt_tokens": counting.prompt_tokens,
        "completion_tokens": counting.completion_tokens,
    }


@flow(name="factrl-synthesize", persist_result=False, log_prints=True)
def teach_flow(items: list[dict], teacher, *, prompt_hash: str, cache_path: str, checkpoint_dir: str,
               batch_size: int, answer_fn: AnswerFn, signature_retries: int, retries: int) -> list[dict]:
    """Fan the items out in batches (:func:`factrl.orchestration.fanout.fan_out`); every batch's record in batch order."""
    batches = [items[i : i + batch_size] for i in range(0, len(items), batch_size)]
    ckpt = Path(checkpoint_dir)
    ckpt.mkdir(parents=True, exist_ok=True)
    paths = [ckpt / f"batch-{i:05d}-{batch_key(teacher.model_name, prompt_hash, b)}.json"
             for i, b in enumerate(batches)]

    def work(index: int, batch: list[dict]) -> dict:
        return answer_batch(index, batch, teacher, cache_path, answer_fn, signature_retries)

    return fan_out(batches, work, paths, task_name="teacher-batch", retries=retries, desc="teacher answers", unit="q")


TeacherBatchError = BatchError  # what a failed teacher batch raises (the finished ones are checkpointed)


def run_teacher(items: list[dict], teacher, *, prompt_hash: str, cache_path: str | Path,
                checkpoint_dir: str | Path, batch_size: int = 8, concurrency: int = 4,
                answer_fn: AnswerFn | None = None, signature_retries: int = 2, retries: int = 2,
                answer_type: type | None = None) -> tuple[list[Any], dict]:
    """Answer ``items`` with ``teacher``; return ``(answers in item order, usage summary)``.

    ``answer_fn`` defaults to ``factrl.signatures.pseudo_answers``; answers are rebuilt as
    ``answer_type`` (default ``signatures.PseudoAnswer``) from the checkpoint records.
    """
    if answer_fn is None or answer_type is None:
        from factrl import signatures

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
