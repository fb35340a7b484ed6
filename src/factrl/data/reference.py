"""Reference trajectories for the supervised warm start (stage ``warmup``): what each HARIS agent
should write, in its own tag protocol, as rows of :data:`factrl.data.schemas.REFERENCES`.

Two sources, one contract:

* :func:`world_references`: the demo world's gold chains. For each training claim the reasoning
  agent asks the chain's sub-questions in order; each names the bridge entity the answer before
  it revealed (never one it has not found yet), reads a report stating the fact, restates the fact
  it learned, rewrites what is left of the claim with that entity in place of the description it
  resolved, and ends with the verdict against the claimed final entity. For each sub-question the
  search agent searches with the real retriever, reads the real top-k passages and reports the
  fact; a search whose passages miss the gold passage is rejected (``retrieval_miss``), so no
  reference report states a fact its passages do not hold. Deterministic given the claims and the
  index.
* :func:`world_m2r_references`: the same gold chains as M2R trajectories (``factrl.agents.m2r``):
  per hop a macro retrieval with the real retriever (rejected when its passages miss the gold
  passage), then the hop's fact saved as key information; the answer fetches the final fact with a
  micro retrieval (the store's real answer) and boxes it.
* :func:`teacher_references`: an LLM teacher (GPT-4o at scale, any OpenAI-compatible model) plays
  both agents through :class:`factrl.agents.haris.Haris` over the real retriever. Rejection
  sampling: a claim's trajectories are kept only when the agents' own parser finds a valid format
  and the verdict equals the gold label; everything else is returned as rejected, with the reason.

Model turns are the agent's own text (the first opens with ``<think>``, the response prefix rollouts
inject); env turns are the raw tool answers. :func:`factrl.agents.rollout.replay` turns a row into
token ids and the loss mask of a rollout.
"""

from __future__ import annotations

from collections.abc import Sequence

from factrl.agents.protocol import parse_reasoning, parse_search
from factrl.agents.rollout import RESULT_CLOSE, RESULT_OPEN
from factrl.agents.tools import RetrieverTool, format_hits
from factrl.data.schemas import DataError
from factrl.data.world_entities import parse_hop_question

WORLD = "world"
TEACHER = "teacher"
THINK = "<think>"  # every agent response opens with it (the rollouts' response prefix)
VERDICT_BOX = {"SUPPORTS": "\\boxed{Support}", "REFUTES": "\\boxed{Refute}"}


def _turns(*pairs: tuple[str, str]) -> list[dict]:
    return [{"role": role, "text": text} for role, text in pairs]


def _row(rid: str, agent: str, source: str, claim: dict, prompt: str, turns: list[dict], *, verdict=None,
         report=None, teacher_model=None, reason: str | None = None) -> dict:
    row = {"id": rid, "agent": agent, "source": source, "claim_id": claim["id"], "prompt": prompt,
           "label": claim.get("label"), "num_hops": claim.get("num_hops"), "turns": turns, "verdict": verdict,
           "report": report, "teacher_model": teacher_model}
    return row if reason is None else row | {"reason": reason}


# --------------------------------------------------------------------------------------------
# the demo world's gold chains
# --------------------------------------------------------------------------------------------


def _chain(claim: dict) -> list[tuple] | None:
    """``[(relation, subject, answer, gold passage ids)]`` per hop, or None when a hop question is
    not one of the world's templates or a hop's subject is not the answer found before it."""
    hops = []
    for k, hop in enumerate(claim.get("hops") or []):
        parsed = parse_hop_question(hop["question"])
        if parsed is None or (k and parsed[1] != hops[-1][2]):
            return None
        hops.append((parsed[0], parsed[1], hop["answer"], list(hop["passage_ids"] or [])))
    return hops or None


def _fact(rel, subject: str, answer: str) -> str:
    """What one hop establishes, as a sentence: ``Orlen Studios was founded by Ilse Parrow.``"""
    return f"{subject} {rel.predicate} {answer}."


def _claimed_end(claim: str, rel) -> str | None:
    """The final entity the claim states (it ends with ``<predicate> <name>.``)."""
    marker = f" {rel.predicate} "
    at = claim.rfind(marker)
    return claim[at + len(marker):].removesuffix(".").strip() if at >= 0 else None


def shrinking_claim(claim_text: str, chain: list[tuple]) -> tuple[str, list[str]] | None:
    """The claim's innermost description and what is left of the claim after each bridge is found.

    ``The birthplace of the performer of the soundtrack of the film Fuzul lies in Debix.`` gives
    ``the soundtrack of the film Fuzul`` (what to ask first) and, after each bridge, the claim with
    its innermost description replaced by the entity found: ``the birthplace of the performer of
    Rili Sessions lies in Debix``, ``the birthplace of Kana Bevox lies in Debix``, ``Vuvos lies in
    Debix``. Returns ``(first, lefts)`` with one entry in ``lefts`` per hop but the last, or None
    when the claim does not describe the chain's start by the first hop's noun.
    """
    body = claim_text[0].lower() + claim_text[1:].removesuffix(".")
    (rel0, start, _, _) = chain[0]
    if len(chain) == 1:
        return body, []
    at = body.rfind(f"the {rel0.noun} of ")
    end = body.find(start, at)
    if at < 0 or end < 0:
        return None
    first = inner = body[at:end + len(start)]
    lefts = []
    for k, (_, _, answer, _) in enumerate(chain[:-1]):
        body = body.replace(inner, answer, 1)
        lefts.append(body)
        inner = f"the {chain[k + 1][0].noun} of {answer}"
    return first, lefts


def reasoning_turns(chain: list[tuple], claimed: str,
                    shrunk: tuple[str, list[str]]) -> tuple[list[dict], str]:
    """The reasoning agent's reference turns along a claim's gold ``chain``, and the verdict;
    ``shrunk`` is the claim read by :func:`shrinking_claim`.

    It asks first about the claim's innermost description, and after each
    report restates the fact and rewrites what is left of the claim with the entity it found in place
    of the description it resolved; it asks about the new innermost description, until the claim is
    a single fact, whose answer it compares with the ``claimed`` entity. Every step copies and
    substitutes; nothing is counted or reversed. Two earlier scaffolds measured worse
    (docs/runs/warm-start-2026-11-24): a plan of the hops written first (the warmed 135M agent wrote
    three items for four-hop claims, whose nesting it must reverse, and stopped one hop short), and
    no plan at all (it asked 3.3 questions on 2-hop claims).
    """
    first, lefts = shrunk
    pairs: list[tuple[str, str]] = []
    opening = f"{THINK}First: {first}.</think>"
    for k, (rel, subject, answer, _) in enumerate(chain):
        question = rel.question.format(x=subject)
        fact = _fact(rel, subject, answer)
        pairs.append(("model", f"{opening}\n<question>{question}</question>"))
        pairs.append(("env", fact))
        if k < len(lefts):
            opening = f"{THINK}{fact} Left: {lefts[k]}.</think>"
    gold = chain[-1][2]
    verdict = "SUPPORTS" if claimed == gold else "REFUTES"
    comparison = "as the claim says" if verdict == "SUPPORTS" else f"not {claimed}"
    pairs.append(("model", f"{THINK}{fact} Nothing left: {gold}, {comparison}.</think>\n"
                           f"<verification>{VERDICT_BOX[verdict]}</verification>"))
    return _turns(*pairs), verdict


def _search_queries(rel, subject: str) -> tuple[str, str]:
    """The queries the reference search agent may write, best first: names and a key word, then
    the name alone (the passage's title)."""
    return f"{subject} {rel.noun}", subject


def search_turns(subject: str, tried: list[tuple[str, list]], max_searches: int, gold_ids) -> tuple[list[dict], bool]:
    """The search agent's reference turns for one question about ``subject``, and whether its last
    search found the gold passage. ``tried``: ``(query, hits)`` of the queries it may write, best
    first. With ``max_searches`` 1 it writes the first query that finds the gold passage (else the
    first); with more, it writes the natural first query and, while a search misses, the next one,
    saying why, so the reference shows a re-query where the first search missed."""
    def found(hits) -> bool:
        return bool({h.id for h in hits} & set(gold_ids))

    if max_searches <= 1:
        query, hits = next(((q, h) for q, h in tried if found(h)), tried[0])
        return _turns(("model", f"{THINK}I will look up {subject}.</think>\n<search>{query}</search>"),
                      ("env", format_hits(hits))), found(hits)
    pairs = []
    opening = f"{THINK}I will look up {subject}.</think>"
    for query, hits in tried[:max_searches]:
        pairs += [("model", f"{opening}\n<search>{query}</search>"), ("env", format_hits(hits))]
        if found(hits):
            break
        opening = f"{THINK}No passage is about {subject}. I will search again.</think>"
    return _turns(*pairs), found(hits)


def world_references(claims: Sequence[dict], retriever_tool: RetrieverTool,
                     max_searches: int = 1) -> tuple[list[dict], list[dict]]:
    """Reference trajectories of both agents from the demo world's gold chains: ``(kept, rejected)``
    rows of REFERENCES / REFERENCES_REJECTED (see the module docstring); ``max_searches``: searches a
    search reference may run (:func:`search_turns`).

    Claims whose chain cannot be read from their hops (not demo-world claims) or whose label
    disagrees with the chain are rejected whole (``no_chain``, ``label_mismatch``). A sub-question
    asked by several claims gets one search reference (the first claim's). Every search goes through
    ``retriever_tool`` in one batched call.
    """
    kept: list[dict] = []
    rejected: list[dict] = []
    searches: list[tuple[dict, int, tuple]] = []  # (claim, hop index, hop) of every new sub-question
    asked: set[str] = set()
    for claim in claims:
        chain = _chain(claim)
        shrunk = None if chain is None else shrinking_claim(claim["claim"], chain)
        if shrunk is None:
            rejected.append(_row(f"{claim['id']}:reasoning", "reasoning", WORLD, claim, claim["claim"], [],
                                 reason="no_chain"))
            continue
        claimed = _claimed_end(claim["claim"], chain[-1][0])
        turns, verdict = reasoning_turns(chain, claimed or "", shrunk)
        row = _row(f"{claim['id']}:reasoning", "reasoning", WORLD, claim, claim["claim"], turns, verdict=verdict)
        if not claimed or verdict != claim["label"]:
            rejected.append(row | {"reason": "label_mismatch"})
            continue
        kept.append(row)
        for k, hop in enumerate(chain):
            question = hop[0].question.format(x=hop[1])
            if question not in asked:
                asked.add(question)
                searches.append((claim, k, hop))
    queries = [q for _, _, (rel, subject, _, _) in searches for q in _search_queries(rel, subject)]
    hits = retriever_tool.search(queries)
    per_hop = len(queries) // max(len(searches), 1)
    for i, (claim, k, (rel, subject, answer, gold_ids)) in enumerate(searches):
        tried = list(zip(_search_queries(rel, subject), hits[i * per_hop:(i + 1) * per_hop]))
        # the searches up to the first whose passages hold the gold passage; a miss is rejected
        turns, found = search_turns(subject, tried, max_searches, gold_ids)
        fact = _fact(rel, subject, answer)
        turns += _turns(("model", f"<report>{fact}</report>"))
        row = _row(f"{claim['id']}:search:{k}", "search", WORLD, claim, rel.question.format(x=subject), turns,
                   report=fact)
        if not found or answer not in turns[-2]["text"]:
            rejected.append(row | {"reason": "retrieval_miss"})
        else:
            kept.append(row)
    return kept, rejected


def m2r_key(rel, subject: str) -> str:
    """The key a reference M2R trajectory saves one hop's fact under: ``founder of Orlen Studios``."""
    return f"{rel.noun} of {subject}"


def world_m2r_references(items: Sequence[dict], macro_tool) -> tuple[list[dict], list[dict]]:
    """Reference M2R trajectories of demo-world QA items (``factrl.data.multihop.world_items``):
    ``(kept, rejected)`` rows of REFERENCES / REFERENCES_REJECTED with agent ``m2r``.

    Per hop the agent searches ``<subject> <noun>`` (``macro_tool``: the real retriever, one batched
    call for all hops), reads the passages and saves ``{"<noun> of <subject>": answer}``; the answer
    phase fetches the last key and boxes its value. An item is rejected (``retrieval_miss``) when a
    hop's passages do not hold the gold passage's answer, or (``no_chain``) when its chain is not
    one of the world's templates.
    """
    import json

    from factrl.agents.m2r import AGENT, KeyInfoStore, micro_answer

    kept: list[dict] = []
    rejected: list[dict] = []
    plans = []
    for item in items:
        chain = [parse_hop_question(q) for q, _ in item.get("chain") or []]
        claim = {"id": item["id"], "label": None, "num_hops": item.get("num_hops")}
        if not chain or any(c is None for c in chain):
            rejected.append(_row(f"{item['id']}:m2r", AGENT, WORLD, claim, item["question"], [], reason="no_chain"))
            continue
        hops = [(rel, subject, answer) for (rel, subject), (_, answer) in zip(chain, item["chain"])]
        plans.append((item, claim, hops))
    queries = [f"{subject} {rel.noun}" for _, _, hops in plans for rel, subject, _ in hops]
    answers = iter(macro_tool(queries) if queries else [])
    for item, claim, hops in plans:
        store = KeyInfoStore()
        pairs: list[tuple[str, str]] = []
        opening = f"{THINK}I need " + ", then ".join(f"the {rel.noun} of {subject if k == 0 else 'that'}"
                                                    for k, (rel, subject, _) in enumerate(hops)) + ".</think>"
        miss = False
        for rel, subject, answer in hops:
            passages = next(answers)
            miss = miss or answer not in passages
            key = m2r_key(rel, subject)
            save = json.dumps({key: answer}, ensure_ascii=False)
            store.save(save)
            pairs += [("model", f"{opening}\n<macro_tool_call>{subject} {rel.noun}</macro_tool_call>"),
                      ("env", passages),
                      ("model", f"{THINK}{_fact(rel, subject, answer)}</think>\n<key_info_save>{save}</key_info_save>"),
                      ("env", "")]
            opening = ""
        rel, subject, gold = hops[-1]
        query = m2r_key(rel, subject)
        pairs += [("model", f"{THINK}I have the {rel.noun} of {subject}.</think>\n<answer><micro_tool_call>{query}"
                            "</micro_tool_call>"),
                  ("env", micro_answer(store, query)),
                  ("model", f"The answer is \\boxed{{{gold}}}.</answer>")]
        row = _row(f"{item['id']}:m2r", AGENT, WORLD, claim, item["question"], _turns(*pairs), report=gold)
        (rejected if miss else kept).append(row | {"reason": "retrieval_miss"} if miss else row)
    return kept, rejected


# --------------------------------------------------------------------------------------------
# an LLM teacher, rejection-sampled
# --------------------------------------------------------------------------------------------


def reference_turns(trajectory) -> list[dict]:
    """A rollout's response as reference turns: the agent's own text and the raw tool answers.

    Text injected before the agent's first turn (the response prefix of token-level rollouts) joins
    that turn, so the reference opens with ``<think>`` whichever backend wrote it; each injected
    result becomes the tool's raw answer (``trajectory.results``), not its wrapped, cut text.
    """
    turns: list[dict] = []
    prefix = ""
    answers = iter(trajectory.results)
    for role, text in trajectory.turns:
        if role == "model":
            turns.append({"role": "model", "text": (prefix + text) if not turns else text})
            prefix = ""
        elif not turns:
            prefix += text
        else:
            turns.append({"role": "env", "text": next(answers)})
    if turns:
        turns[0]["text"] = turns[0]["text"].lstrip()
    return turns


def _teacher_problem(turns: list[dict], parse) -> str | None:
    """Why a teacher trajectory cannot be a reference (None when it can)."""
    if not parse.format_valid:
        return "format_invalid"
    if not turns or not turns[0]["text"].startswith(THINK):
        return "no_think_opening"  # rollouts inject <think> first: a reference must open with it
    return None


def teacher_references(claims: Sequence[dict], teacher, retriever_tool: RetrieverTool, *, reason_params,
                       search_params, samples: int = 1) -> tuple[list[dict], list[dict]]:
    """``samples`` HARIS rollouts per claim with ``teacher`` as both agents, rejection-sampled:
    ``(kept, rejected)`` rows of REFERENCES / REFERENCES_REJECTED.

    A reasoning trajectory is kept when its format is valid, it opens with ``<think>`` and its verdict
    equals the claim's gold label (else ``format_invalid``, ``no_think_opening``, ``wrong_verdict``);
    the search trajectories behind its questions are kept when their own format is valid (else
    ``format_invalid``, or ``claim_rejected`` when the claim's verdict was not kept).
    """
    from factrl.agents.haris import Haris

    agent = Haris(teacher, retriever_tool, search_llm=teacher, reason_params=reason_params,
                  search_params=search_params)
    results = agent.verify([c["claim"] for c in claims], n=samples)
    model = getattr(teacher, "model_name", None)
    kept: list[dict] = []
    rejected: list[dict] = []
    for i, res in enumerate(results):
        claim, j = claims[i // samples], i % samples
        turns = reference_turns(res.trajectory)
        problem = _teacher_problem(turns, res.parse)
        if problem is None and res.verdict != claim["label"]:
            problem = "wrong_verdict"
        row = _row(f"{claim['id']}:reasoning:{j}", "reasoning", TEACHER, claim, claim["claim"], turns,
                   verdict=res.verdict, teacher_model=model)
        (kept if problem is None else rejected).append(row if problem is None else row | {"reason": problem})
        for k, search in enumerate(res.searches):
            if search is None:
                continue
            s_turns = reference_turns(search.trajectory)
            s_problem = "claim_rejected" if problem is not None else _teacher_problem(s_turns, search.parse)
            s_row = _row(f"{claim['id']}:search:{j}.{k}", "search", TEACHER, claim, search.question, s_turns,
                         report=search.report, teacher_model=model)
            (kept if s_problem is None else rejected).append(
                s_row if s_problem is None else s_row | {"reason": s_problem})
    return kept, rejected


def check_reference(row: dict) -> str | None:
    """Why a REFERENCES row is not a well-formed trajectory of its agent (None when it is): the
    agents' own parser on its text, the ``<think>`` opening, and model / env alternation."""
    turns = row["turns"] or []
    roles = [t["role"] for t in turns]
    if not roles or roles[0] != "model" or roles[-1] != "model" or any(a == b for a, b in zip(roles, roles[1:])):
        return f"turns must alternate model / env, starting and ending with a model turn (got {roles})"
    if not turns[0]["text"].startswith(THINK):
        return f"the first model turn must open with {THINK}"
    if row["agent"] == "m2r":
        from factrl.agents.m2r import parse_m2r, reference_text

        parse = parse_m2r(reference_text(turns))
        return None if parse.format_valid else f"invalid m2r format: {parse.error}"
    text = "".join(t["text"] if t["role"] == "model" else RESULT_OPEN + t["text"] + RESULT_CLOSE for t in turns)
    if row["agent"] == "reasoning":
        parse = parse_reasoning(text)
    elif row["agent"] == "search":
        parse = parse_search(text)
    else:
        return f"unknown agent {row['agent']!r} (expected reasoning or search)"
    return None if parse.format_valid else f"invalid {row['agent']} format: {parse.error}"


def validate_references(rows: Sequence[dict], file: str) -> None:
    """Raise :class:`DataError` naming the first row of ``file`` that :func:`check_reference` rejects."""
    for i, row in enumerate(rows):
        problem = check_reference(row)
        if problem is not None:
            raise DataError(file, i, "turns", problem)
