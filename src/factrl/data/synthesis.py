"""Pseudo-label synthesis for the search agent (HARIS A.4), the pure parts.

The reasoning agent's rollouts on a round's claims yield the questions it actually asks. One
question is kept per claim: in epoch 1 (``first``) the first question of the rollout, because an
untrained agent's later turns are unreliable; later (``all``) one drawn uniformly from all of its
distinct questions. The draw is seeded per claim id, so it does not depend on row order.

Each question is paired with the claim's gold evidence and sent to the teacher, which answers it
or says it cannot (``None``). Answered pairs become rows of ``schemas.QA_PAIRS`` with provenance
(agent checkpoint, teacher model, prompt hash, round); ``None`` answers, claims whose rollout asked
nothing, and teacher failures go to a rejected table with the reason, so nothing is dropped
silently and every rate is reported.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from factrl.data import world_teacher
from factrl.data.schemas import QA_PAIRS

QUESTION_MODES = ("first", "all")
# Rejected rows: a QA_PAIRS row plus why it was rejected.
REJECTED = QA_PAIRS.append(pa.field("reason", pa.string(), nullable=False)).append(pa.field("error", pa.string()))
REASONS = ("none", "teacher_error", "no_question")


@dataclass(frozen=True)
class Provenance:
    """Where a round's pairs come from; stored on every row."""

    round: int
    agent_checkpoint: str
    teacher_model: str
    prompt_hash: str


def _clean(questions: Sequence[str] | None) -> list[str]:
    """Non-empty questions, stripped, first occurrence kept."""
    out: list[str] = []
    for q in questions or ():
        q = " ".join(str(q).split())
        if q and q not in out:
            out.append(q)
    return out


def sample_question(claim_id: str, questions: Sequence[str] | None, mode: str, seed: int) -> str | None:
    """The one question kept for a claim (``None`` when the rollout asked nothing)."""
    if mode not in QUESTION_MODES:
        raise ValueError(f"question sampling mode must be one of {QUESTION_MODES}, got {mode!r}")
    asked = _clean(questions)
    if not asked:
        return None
    if mode == "first":
        return asked[0]
    rng = np.random.default_rng([seed, zlib.crc32(claim_id.encode())])
    return asked[int(rng.integers(len(asked)))]


def sample_questions(claim_ids: Sequence[str], rollouts: Sequence[Sequence[str]], mode: str, seed: int) -> list[str | None]:
    """:func:`sample_question` for every claim; ``rollouts[i]`` are claim i's questions."""
    if len(claim_ids) != len(rollouts):
        raise ValueError(f"{len(rollouts)} rollouts for {len(claim_ids)} claims")
    return [sample_question(cid, qs, mode, seed) for cid, qs in zip(claim_ids, rollouts)]


def gold_evidence(claim: Mapping[str, Any], passages: Mapping[str, str] | None = None) -> list[str]:
    """The gold evidence a teacher answers from, in order of preference.

    1. the passages named by ``evidence_ids`` (demo world, Climate-FEVER style corpora);
    2. EX-FEVER's human explanation (its evidence field holds only titles; the paper uses it);
    3. the evidence texts (HOVER with text, FEVER) or, failing those, titles;
    4. any explanation.
    """
    ids = claim.get("evidence_ids") or []
    if passages and ids and all(i in passages for i in ids):
        return [passages[i] for i in ids]
    explanation = (claim.get("explanation") or "").strip()
    if explanation and str(claim.get("source") or "").lower().startswith("exfever"):
        return [explanation]
    evidence = [e for e in (claim.get("evidence") or []) if e and str(e).strip()]
    if evidence:
        return [str(e) for e in evidence]
    return [explanation] if explanation else []


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", " ".join(text.lower().split()))


def gold_answer(claim: Mapping[str, Any], question: str | None) -> str | None:
    """The known answer of ``question``: the answer of the claim's gold hop question it is, else
    (demo-world claims) the answer the gold chain gives when the question asks about one of its
    facts in other words (``world_teacher.answer_from_chain``); None when unknown."""
    if not question:
        return None
    wanted = _norm(question)
    hops = [h for h in claim.get("hops") or [] if h and h.get("question")]
    for hop in hops:
        if _norm(hop["question"]) == wanted:
            return hop.get("answer")
    try:
        return world_teacher.answer_from_chain(hops, question)
    except ValueError:  # hops that are not demo-world sub-questions: no chain to read
        return None


def teacher_item(claim: Mapping[str, Any], question: str, evidence: list[str]) -> dict:
    """The input of a teacher's ``answer_fn`` (keys claim, label, evidence, question; and hops, the
    gold chain, for claims that have one: what the world teacher reads)."""
    item = {"claim": claim["claim"], "label": claim["label"], "evidence": evidence, "question": question}
    if claim.get("hops"):
        item["hops"] = [dict(h) for h in claim["hops"]]
    return item


def item_key(item: Mapping[str, Any]) -> str:
    """A stable hash of one teacher item (checkpoint names, test call counts)."""
    blob = json.dumps(dict(item), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def build_items(
    claims: Sequence[Mapping[str, Any]], questions: Sequence[str | None], passages: Mapping[str, str] | None = None
) -> tuple[list[dict], list[dict]]:
    """Split the claims into teacher work and claims without a question.

    Returns ``(work, unasked)``: ``work`` rows carry ``claim`` (the claim record), ``question``,
    ``evidence`` and ``item`` (what the teacher gets); ``unasked`` rows the claim records alone.
    """
    work, unasked = [], []
    for claim, question in zip(claims, questions, strict=True):
        if question is None:
            unasked.append(dict(claim))
            continue
        evidence = gold_evidence(claim, passages)
        work.append({"claim": dict(claim), "question": question, "evidence": evidence,
                     "item": teacher_item(claim, question, evidence)})
    return work, unasked


def _row(claim: Mapping[str, Any], question: str, evidence: list[str], prov: Provenance,
         rationale: str | None = None, answer: str | None = None) -> dict:
    return {
        "id": f"qa-r{prov.round}-{claim['id']}",
        "claim_id": claim["id"],
        "claim": claim["claim"],
        "label": claim["label"],
        "question": question,
        "evidence": evidence,
        "rationale": rationale,
        "answer": answer,
        "gold_answer": gold_answer(claim, question),
        "round": prov.round,
        "agent_checkpoint": prov.agent_checkpoint,
        "teacher_model": prov.teacher_model,
        "prompt_hash": prov.prompt_hash,
    }


def _is_none(answer: str | None) -> bool:
    # the teacher's "no answer applies"; the signature maps it to None, a literal is caught too
    return answer is None or _norm(answer) in {"", "none", "null", "na", "n a", "unknown"}


def assemble(work: Sequence[Mapping[str, Any]], answers: Sequence[Any], unasked: Sequence[Mapping[str, Any]],
             prov: Provenance) -> tuple[pa.Table, pa.Table, dict]:
    """Pair teacher answers with their questions; return ``(qa, rejected, stats)``.

    ``answers[i]`` is the :class:`~factrl.signatures.PseudoAnswer` of ``work[i]`` (fields
    ``answer``, ``rationale``, ``ok``, ``error``). Answered pairs go to ``qa``; ``None`` answers,
    teacher failures and claims without a question go to ``rejected`` with the reason.
    """
    if len(work) != len(answers):
        raise ValueError(f"{len(answers)} teacher answers for {len(work)} questions")
    kept, rejected = [], []
    for w, a in zip(work, answers):
        row = _row(w["claim"], w["question"], w["evidence"], prov, rationale=getattr(a, "rationale", None))
        if not a.ok:
            rejected.append(row | {"reason": "teacher_error", "error": a.error or "teacher failed", "answer": None})
        elif _is_none(a.answer):
            rejected.append(row | {"reason": "none", "error": None, "answer": None})
        else:
            kept.append(row | {"answer": a.answer.strip()})
    for claim in unasked:
        rejected.append(_row(claim, "", [], prov) | {"reason": "no_question", "error": None})
    asked = len(work)
    n_none = sum(r["reason"] == "none" for r in rejected)
    n_err = sum(r["reason"] == "teacher_error" for r in rejected)
    with_gold = [r for r in kept if r["gold_answer"] is not None]
    stats = {
        "claims": asked + len(unasked),
        "questions": asked,
        "no_question": len(unasked),
        "kept": len(kept),
        "none": n_none,
        "teacher_errors": n_err,
        # share of the teacher's valid answers that were None (the paper drops about 10%)
        "none_rate": n_none / (asked - n_err) if asked - n_err else 0.0,
        "teacher_error_rate": n_err / asked if asked else 0.0,
        "with_gold_answer": len(with_gold),
        "gold_answer_accuracy": (sum(answer_matches(r["answer"], r["gold_answer"]) for r in with_gold) / len(with_gold)
                                 if with_gold else None),
    }
    qa = pa.Table.from_pylist(kept, schema=QA_PAIRS)
    rej = pa.Table.from_pylist(rejected, schema=REJECTED)
    return qa, rej, stats


def answer_matches(answer: str | None, gold: str | None) -> bool:
    """The gold answer (a name in the demo world) appears in the teacher's answer, case-insensitive."""
    if not answer or not gold:
        return False
    return _norm(gold) in _norm(answer)
