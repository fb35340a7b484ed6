"""HARIS's pseudo-labels for round r (paper A.4), the recipe of stage ``synthesize@r``.

The reasoning agent H_prev (with the search agent L_prev answering its questions over the index)
verifies each claim of the round's segment (:func:`haris_rollout_fn`); the questions it asks are
checkpointed (:func:`cached_rollouts`, keyed by everything they depend on, so a resumed run asks the
teacher exactly the same questions); one question per claim is kept and paired with the gold
evidence (:mod:`factrl.data.synthesis`), and the teacher answers it (:func:`teacher_answer_fn`,
fanned out by :mod:`factrl.orchestration.teacher`). :func:`synthesize_round` returns the answered
pairs (QA_PAIRS), the rejected ones with the reason, and a summary (rates, tokens, cost, calls).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from factrl.data import synthesis
from factrl.io import write_json
from factrl.model_names import RoundParams
from factrl.recipes.haris.params import SynthesizeParams
from factrl.recipes.teacher_params import TeacherParams
from factrl.signatures import pseudo_qa_prompt_hash

RolloutFn = Callable[[list[dict]], list[list[str]]]  # claim records -> questions asked per claim


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------


def evidence_passages(passages_file: Path, claims: pa.Table) -> dict[str, str]:
    """Texts of the passages the claims cite (read with a filter: the corpus may be large)."""
    ids = {i for row in claims.column("evidence_ids").to_pylist() for i in (row or [])}
    if not ids or not passages_file.exists():
        return {}
    table = pq.read_table(passages_file, columns=["id", "title", "text"], filters=pc.field("id").isin(list(ids)))
    return {i: (f"{t}: {x}" if t else x) for i, t, x in zip(*(table.column(c).to_pylist() for c in ("id", "title", "text")))}


# --------------------------------------------------------------------------------------------
# rollouts (the reasoning agent's questions)
# --------------------------------------------------------------------------------------------


def haris_rollout_fn(reasoner: str, searcher: str, index_dir: Path, params: SynthesizeParams, mode: str) -> RolloutFn:
    """``rollout_questions`` over HARIS: H (reasoner) asks, L (searcher) answers over the index.

    Epoch 1 keeps only the first question, so its rollouts stop after one tool call.
    """
    from factrl.agents import haris
    from factrl.hardware import resolve_device
    from factrl.llm.backends import endpoint_spec, load_llm
    from factrl.llm.vllm import served_name
    from factrl.retrieval.index import Retriever

    def spec(checkpoint: str, endpoint: str) -> str:  # in-process, or the checkpoint behind its endpoint
        return endpoint_spec(served_name(checkpoint), endpoint) if endpoint else checkpoint

    reason_spec, search_spec = spec(reasoner, params.reason_endpoint), spec(searcher, params.search_endpoint)
    device = str(resolve_device(params.device, key="synthesize.device"))
    reason_llm = load_llm(reason_spec, device=device)
    search_llm = reason_llm if search_spec == reason_spec else load_llm(search_spec, device=device)
    retriever = Retriever(str(index_dir), mode=params.retrieval_mode)
    sampling = {"temperature": params.rollout_temperature, "seed": params.seed,
                "max_new_tokens": params.rollout_max_tokens}
    reason_params = haris.default_reasoning_params(**sampling, **({"max_turns": 1} if mode == "first" else {}))
    agent = haris.Haris(reason_llm, retriever, search_llm=search_llm,
                        reason_params=reason_params, search_params=haris.default_search_params(**sampling))

    def rollout_questions(claims: list[dict]) -> list[list[str]]:
        return [list(r.trajectory.queries) for r in agent.verify([c["claim"] for c in claims])]

    return rollout_questions


def cached_rollouts(claims: list[dict], rollout_fn: RolloutFn, path: Path) -> list[list[str]]:
    """Run the rollouts once; a rerun (resume) reads the questions back from ``path``."""
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))["questions"]
    questions = rollout_fn(claims)
    if len(questions) != len(claims):
        raise RuntimeError(f"rollout function returned {len(questions)} rollouts for {len(claims)} claims")
    write_json({"claim_ids": [c["id"] for c in claims], "questions": questions}, path)
    return questions


# --------------------------------------------------------------------------------------------
# the round
# --------------------------------------------------------------------------------------------


def teacher_answer_fn(teacher: TeacherParams, p_hash: str | None = None) -> tuple[Callable, type, str]:
    """``(answer_fn, answer_type, prompt_hash)`` of the teacher backend: the world teacher reads the
    gold chain (``world_teacher.pseudo_answers``); an LLM teacher answers the pseudo-QA signature."""
    from factrl import signatures

    if teacher.backend == "world":
        from factrl.data import world_teacher

        return world_teacher.pseudo_answers, signatures.PseudoAnswer, p_hash or world_teacher.prompt_hash()
    answer_fn = functools.partial(signatures.pseudo_answers, params=dataclasses.replace(
        signatures.PSEUDO_QA_PARAMS, max_tokens=teacher.max_tokens))
    return answer_fn, signatures.PseudoAnswer, p_hash or pseudo_qa_prompt_hash()


def synthesize_round(claims: pa.Table, rnd: RoundParams, params: SynthesizeParams, *, rollout_fn: RolloutFn,
                     teacher, agent_checkpoint: str, passages: dict[str, str], work_dir: Path,
                     cache_path: Path, answer_fn=None, answer_type=None, p_hash: str | None = None
                     ) -> tuple[pa.Table, pa.Table, dict]:
    """Rollouts -> one question per claim -> teacher answers -> ``(qa, rejected, summary)``."""
    from factrl.orchestration.teacher import run_teacher

    records = claims.to_pylist()
    key = hashlib.sha256(json.dumps([agent_checkpoint, rnd.id, params.seed, params.rollout_temperature,
                                     params.rollout_max_tokens, rnd.questions, [r["id"] for r in records]]).encode())
    questions_asked = cached_rollouts(records, rollout_fn, work_dir / f"rollouts-{key.hexdigest()[:20]}.json")
    picked = synthesis.sample_questions([r["id"] for r in records], questions_asked, rnd.questions, params.seed)
    work, unasked = synthesis.build_items(records, picked, passages)
    if answer_fn is None:
        answer_fn, answer_type, p_hash = teacher_answer_fn(params.teacher, p_hash)
    p_hash = p_hash or pseudo_qa_prompt_hash()
    answers, usage = run_teacher(
        [w["item"] for w in work], teacher, prompt_hash=p_hash, cache_path=cache_path,
        checkpoint_dir=work_dir / "teacher", batch_size=params.batch_size, concurrency=params.concurrency,
        answer_fn=answer_fn, answer_type=answer_type, signature_retries=params.signature_retries,
        retries=params.retries)
    prov = synthesis.Provenance(rnd.id, agent_checkpoint, teacher.model_name, p_hash)
    qa, rejected, stats = synthesis.assemble(work, answers, unasked, prov)
    p_in, p_out = params.teacher.price_per_mtok
    usage["cost_usd"] = (usage["prompt_tokens"] * p_in + usage["completion_tokens"] * p_out) / 1e6
    summary = {"round": rnd.id, "segment": rnd.segment, "questions_mode": rnd.questions,
               "agent_checkpoint": agent_checkpoint, "teacher_model": teacher.model_name,
               "teacher_backend": params.teacher.backend, "prompt_hash": p_hash} | stats | {"usage": usage}
    return qa, rejected, summary
