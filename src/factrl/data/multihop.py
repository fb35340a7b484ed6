"""Multi-hop questions with short answers, M2R's task: from demo-world claims and from QA files.

A QA item is ``{id, question, answers, num_hops, chain}``: ``answers`` the gold answer and its
aliases (token F1 takes the best), ``chain`` the hops ``[(sub-question, answer)]`` where known (the
demo world; None for MuSiQue / HotpotQA).

* :func:`world_question`: a demo-world claim's gold chain as one question about its final entity,
  each bridge described, never named: hops "Who founded Orlen Studios?" then "In which city was
  Ilse Parrow born?" become "In which city was the founder of Orlen Studios born?". The answer is
  the chain's true end, whatever the claim's label says (a REFUTES claim's chain is the true one).
* :func:`read_qa_jsonl`: MuSiQue / HotpotQA records of ../shared/data (``question``, ``answer``,
  ``answer_aliases``); bad records are a DataError naming file, row and field.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from factrl.data.schemas import DataError
from factrl.data.sources import iter_jsonl
from factrl.data.world_entities import parse_hop_question


def world_question(claim: dict) -> tuple[str, list[tuple[str, str]]] | None:
    """``(question, [(sub-question, answer)])`` of a demo-world claim, or None when its hops are not
    a chain of the world's templates (each hop's subject the answer before it)."""
    hops = claim.get("hops") or []
    parsed = []
    for k, hop in enumerate(hops):
        p = parse_hop_question(hop["question"])
        if p is None or (k and p[1] != hops[k - 1]["answer"]):
            return None
        parsed.append(p)
    if not parsed:
        return None
    subject = parsed[0][1]
    for rel, _ in parsed[:-1]:
        subject = f"the {rel.noun} of {subject}"
    question = parsed[-1][0].question.format(x=subject)
    return question, [(h["question"], h["answer"]) for h in hops]


def world_items(claims: pa.Table | Iterable[dict]) -> list[dict]:
    """QA items of demo-world claims (claims without a readable chain are skipped); claims with the
    same question (a SUPPORTS claim and its REFUTES twin) give one item."""
    rows = claims.to_pylist() if isinstance(claims, pa.Table) else list(claims)
    items, seen = [], set()
    for claim in rows:
        found = world_question(claim)
        if found is None or found[0] in seen:
            continue
        seen.add(found[0])
        question, chain = found
        items.append({"id": str(claim["id"]), "question": question, "answers": [chain[-1][1]],
                      "num_hops": len(chain), "chain": chain})
    return items


def read_qa_jsonl(path: str | Path, limit: int = 0) -> list[dict]:
    """QA items of a MuSiQue / HotpotQA file of ../shared/data (at most ``limit``, 0 = all)."""
    items = []
    for row, record in iter_jsonl(path):
        question = record.get("question") or record.get("claim")
        if not isinstance(question, str) or not question.strip():
            raise DataError(str(path), row, "question", "missing or empty question")
        answer = record.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            raise DataError(str(path), row, "answer", "missing or empty answer")
        aliases = record.get("answer_aliases") or []
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise DataError(str(path), row, "answer_aliases", "expected a list of strings")
        items.append({"id": str(record.get("id", row)), "question": question.strip(),
                      "answers": [answer.strip(), *[a.strip() for a in aliases if a.strip()]],
                      "num_hops": record.get("num_hops"), "chain": None})
        if limit and len(items) >= limit:
            break
    return items
