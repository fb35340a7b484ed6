"""The paper's baselines, on the same retriever, LLM protocol and rollout engine as HARIS.

* :func:`rag`: the claim itself is the query; its top-3 passages are the context of one
  claim-verification call (:func:`factrl.signatures.verify_claims`).
* :func:`decompose_then_verify`: the LLM splits the claim into sub-claims; each is retrieved for
  and verified like RAG; the claim is supported only if every sub-claim is (logical AND).
* :func:`single_agent`: one agent both searches (``<search>`` -> top-3) and decides
  (``<verification>\\boxed{...}``), through :func:`factrl.agents.rollout.run_rollouts`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from factrl.agents.protocol import REFUTES, SUPPORTS, ReasoningParse, parse_single_agent
from factrl.agents.rollout import RolloutParams, Trajectory, chat_prompt_ids, run_rollouts
from factrl.agents.tools import RetrieverTool, format_hits
from factrl.llm.base import Message, SamplingParams
from factrl.signatures import verify_claims

TOP_K = 3
MAX_SUBCLAIMS = 6  # a 4-hop claim has four facts; more lines means the model rambled

DECOMPOSE_SYSTEM = (
    "Split a claim into the simple facts it asserts. Write one short, self-contained sentence per "
    "line, each starting with '- '. Name people, places and works explicitly; no pronouns that "
    "point to another line. Write nothing else."
)
_DECOMPOSE_EXAMPLE_USER = "Claim: The director of the film Blue Lantern was born in the capital of Peru."
_DECOMPOSE_EXAMPLE_REPLY = (
    "- The film Blue Lantern has a director.\n"
    "- The director of the film Blue Lantern was born in Lima.\n"
    "- Lima is the capital of Peru."
)
DECOMPOSE_PARAMS = SamplingParams(max_tokens=96, temperature=0.0, seed=0)

SINGLE_AGENT_SYSTEM = """\
You decide whether a claim is true, step by step, using an encyclopedia search tool.

How to write:
- Put your reasoning inside <think> </think>.
- To search, write a short query inside <search> </search>; the best passages come back inside \
<result> </result>. Never write <result> yourself. Search as often as you need.
- Finish with your decision inside <verification> </verification>, written as \\boxed{Support} or \
\\boxed{Refute}.

Example.
Claim: The founder of the company Orlen Studios was born in Varna.
<think>I need the founder of Orlen Studios, then that person's birthplace.</think>
<search>Orlen Studios founder</search>
<result>Doc 1 (Orlen Studios) Orlen Studios is a company founded by Ilse Parrow.</result>
<search>Ilse Parrow birthplace</search>
<result>Doc 1 (Ilse Parrow) Ilse Parrow is a painter born in Tessik.</result>
<think>Ilse Parrow was born in Tessik, not Varna.</think>
<verification>\\boxed{Refute}</verification>"""


@dataclass
class BaselineResult:
    """One claim's verdict ("SUPPORTS" | "REFUTES" | None when the model never gave one)."""

    claim: str
    verdict: str | None
    contexts: list[str] = field(default_factory=list)  # what each verification call read
    subclaims: list[str] = field(default_factory=list)  # decompose-then-verify only
    sub_verdicts: list[str | None] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    trajectory: Trajectory | None = None  # single agent only
    parse: ReasoningParse | None = None


def _contexts(retriever, queries: list[str], k: int) -> list[str]:
    return [format_hits(h) for h in retriever.search(queries, k=k)] if queries else []


def rag(claims: list[str], *, llm, retriever, k: int = TOP_K, retries: int = 2,
        params: SamplingParams | None = None) -> list[BaselineResult]:
    """RAG: retrieve top-``k`` passages with the claim as query, then one verification call
    (``params``: its sampling, default greedy)."""
    contexts = _contexts(retriever, list(claims), k)
    verdicts = verify_claims(llm, [{"claim": c, "context": x} for c, x in zip(claims, contexts)], retries=retries,
                             params=params)
    return [
        BaselineResult(c, v.label if v.ok else None, [x], errors=[v.error] if v.error else [])
        for c, x, v in zip(claims, contexts, verdicts)
    ]


def decompose_messages(claim: str) -> list[Message]:
    return [
        {"role": "system", "content": DECOMPOSE_SYSTEM},
        {"role": "user", "content": _DECOMPOSE_EXAMPLE_USER},
        {"role": "assistant", "content": _DECOMPOSE_EXAMPLE_REPLY},
        {"role": "user", "content": f"Claim: {claim}"},
    ]


def parse_subclaims(text: str) -> list[str]:
    """Bulleted or numbered lines of a decomposition; unique, in order, at most MAX_SUBCLAIMS."""
    out: list[str] = []
    for line in text.splitlines():
        m = re.match(r"^\s*(?:[-*\u2022]|\d+[.)])\s+(.+?)\s*$", line)
        if m and m.group(1) not in out and len(m.group(1).split()) >= 3:
            out.append(m.group(1))
    return out[:MAX_SUBCLAIMS]


def and_verdict(labels: list[str | None]) -> str | None:
    """Logical AND of sub-claim verdicts: any refuted -> REFUTES; all supported -> SUPPORTS; else None."""
    if any(v == REFUTES for v in labels):
        return REFUTES
    if labels and all(v == SUPPORTS for v in labels):
        return SUPPORTS
    return None


def decompose_then_verify(claims: list[str], *, llm, retriever, k: int = TOP_K, retries: int = 2,
                          params: SamplingParams = DECOMPOSE_PARAMS) -> list[BaselineResult]:
    """Decompose each claim, verify every sub-claim on its own top-``k`` passages, AND the verdicts.

    A claim whose decomposition yields no usable line is verified whole (one sub-claim).
    """
    replies = llm.chat([decompose_messages(c) for c in claims], params)
    subs = [parse_subclaims(r[0].text) or [c] for c, r in zip(claims, replies)]
    flat = [s for group in subs for s in group]
    contexts = _contexts(retriever, flat, k)
    verdicts = verify_claims(llm, [{"claim": s, "context": x} for s, x in zip(flat, contexts)], retries=retries)
    out, i = [], 0
    for claim, group in zip(claims, subs):
        vs = verdicts[i : i + len(group)]
        labels = [v.label if v.ok else None for v in vs]
        out.append(BaselineResult(claim, and_verdict(labels), contexts[i : i + len(group)], list(group),
                                  labels, [v.error for v in vs if v.error]))
        i += len(group)
    return out


def single_agent_messages(claim: str) -> list[Message]:
    return [{"role": "system", "content": SINGLE_AGENT_SYSTEM}, {"role": "user", "content": f"Claim: {claim}"}]


def default_single_agent_params(**kw) -> RolloutParams:
    return RolloutParams(**{"max_turns": 4, "max_new_tokens": 160, "max_context_tokens": 4096,
                            "max_tool_response_tokens": 384, "end_tags": ("</verification>",),
                            "response_prefix": "<think>", **kw})


def single_agent(claims: list[str], *, llm, retriever, k: int = TOP_K, n: int = 1,
                 params: RolloutParams | None = None) -> list[BaselineResult]:
    """One agent searches with the retriever and decides alone (``n`` rollouts per claim)."""
    tool = retriever if isinstance(retriever, RetrieverTool) else RetrieverTool(retriever, k=k)
    convs = [single_agent_messages(c) for c in claims]
    trajs = run_rollouts(llm, [chat_prompt_ids(llm, c) for c in convs], tool,
                         params or default_single_agent_params(), n=n, messages=convs)
    out = []
    for claim, t in zip([c for c in claims for _ in range(n)], trajs):
        p = parse_single_agent(t.response_text)
        out.append(BaselineResult(claim, p.verdict, list(t.results), trajectory=t, parse=p,
                                  errors=[p.error] if p.error else []))
    return out
