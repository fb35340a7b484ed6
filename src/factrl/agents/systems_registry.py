"""The one registry of claim-verifying systems: what ``evaluate`` compares, what a debate member
answers with and what ``factrl serve`` runs.

A system takes a batch of claim texts, its LLM(s) and the retriever and returns one :class:`ClaimRun`
per claim (the verdict, a text a reader can follow, the questions and searches behind it, the
trajectories). Every system is registered by name in :data:`SYSTEMS` with its own settings
(:class:`RegisteredSystem`), and every caller runs it through :meth:`RegisteredSystem.answer`:

* HARIS (:func:`haris_runs`, name :data:`HARIS`) runs on a model *pair* (reasoning and search agent)
  and reports a raw confidence and its evidence;
* the baselines (single agent, RAG, Decompose-Then-Verify of :mod:`factrl.agents.baselines`) run on
  one model: a new one registered here is at once an ``evaluate.systems`` name and a
  ``debate.pool[i].system``.

Callers: ``factrl.eval.systems`` (evaluation, greedy), ``factrl.agents.debate`` (the generation
phase, sampled per member: ``temperature`` and ``seed``) and ``factrl.service.engine`` (HARIS).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from factrl.agents import baselines
from factrl.agents.abstain import Grounding
from factrl.agents.evidence import RecordingRetriever, RunEvidence, run_evidence
from factrl.agents.haris import Haris, HarisResult
from factrl.agents.rollout import Trajectory
from factrl.agents.tools import RetrieverTool
from factrl.llm.base import SamplingParams
from factrl.registry import Registry
from factrl.signatures import VERIFY_PARAMS
from factrl.verdicts import verdict_word

HARIS = "haris"


@dataclass
class ClaimRun:
    """One system's work on one claim.

    verdict: "SUPPORTS" | "REFUTES" | None (no verdict: a malformed or unfinished response).
    text: what the system wrote for its verdict, for a reader (a debate's peers): the agent's response,
        or a line of what a call-based baseline read and decided.
    error: why the run gave no valid answer (the parser's or the calls' errors); None when it did.
    questions: questions asked to a search agent (HARIS) or sub-claims checked (Decompose-Then-Verify).
    searches: retriever calls made for the claim, over all agents.
    trajectories: (agent, trajectory, format_valid) of every rollout behind the verdict.
    raw_confidence: the system's own probability that ``verdict`` is right, in [0, 1] (HARIS: the
        verdict token's, ``factrl.agents.confidence``; 0.0 without a verdict); None for systems
        that give none (the baselines). Uncalibrated: ``factrl.eval.calibration`` maps it.
    grounding: how far the run's citations bear on the claim (HARIS: ``factrl.agents.abstain.grounding``
        over the sentences its searches read, ``factrl.agents.evidence``), what ``evaluate`` decides NOT
        ENOUGH INFO from; None for systems that cite nothing (the baselines).
    searched: the run's search queries (HARIS), what a NOT ENOUGH INFO answer says was searched.
    result / evidence: HARIS's own result (:class:`factrl.agents.haris.HarisResult`) and its evidence
        (:class:`factrl.agents.evidence.RunEvidence`: per question, what was retrieved, read and cited),
        for a caller that shows more than the fields above (``factrl serve``); None for the baselines.
    """

    verdict: str | None
    questions: int = 0
    searches: int = 0
    format_valid: bool | None = None
    trajectories: list[tuple[str, Trajectory, bool | None]] = field(default_factory=list)
    raw_confidence: float | None = None
    text: str = ""
    error: str | None = None
    grounding: Grounding | None = None
    searched: list[str] = field(default_factory=list)
    result: HarisResult | None = None
    evidence: RunEvidence | None = None


def seed_for(temperature: float, seed: int | None) -> int | None:
    """A sampled call's seed; greedy calls get none, so callers that share a model and decode
    greedily share one batched call (and one cache entry per prompt)."""
    return seed if temperature > 0 else None


@dataclass(frozen=True)
class RegisteredSystem:
    """A registered system.

    label: its name in the evaluation report (HARIS rows are named by their checkpoint instead).
    run: ``run(claims, llm, retriever, *, top_k, max_new_tokens, max_turns, temperature, seed) -> [ClaimRun]``
        over a batch (``temperature`` 0: greedy; ``seed``: a sampled call's); a pair system's also
        takes ``search_llm``.
    fixed_new_tokens: the token budget of the method's own calls where the method fixes it (a reply of
        a set shape); None: the caller's per-turn ``max_new_tokens`` (an agent that reasons in turns).
    pair: it runs on a (reasoning, search) model pair, evaluated once per checkpoint pair (HARIS);
        otherwise on one model, the base model in ``evaluate``.
    """

    label: str
    run: Callable[..., list[ClaimRun]]
    fixed_new_tokens: int | None = None
    pair: bool = False

    def answer(self, claims: list[str], llm, retriever, *, top_k: int, max_new_tokens: int, max_turns: int,
               temperature: float = 0.0, seed: int | None = None, search_llm=None) -> list[ClaimRun]:
        """The system over ``claims`` at the caller's budgets, its fixed token budget taking precedence;
        ``search_llm``: a pair system's search model (None: ``llm`` searches too)."""
        tokens = self.fixed_new_tokens if self.fixed_new_tokens is not None else max_new_tokens
        extra = {"search_llm": search_llm} if self.pair else {}
        return self.run(list(claims), llm, retriever, top_k=top_k, max_new_tokens=tokens, max_turns=max_turns,
                        temperature=temperature, seed=seed, **extra)


SYSTEMS: Registry[RegisteredSystem] = Registry("system")


def system(name: str, label: str, *, fixed_new_tokens: int | None = None, pair: bool = False) -> Callable:
    """Decorator registering a system's batch function in :data:`SYSTEMS` as ``name``."""

    def deco(fn: Callable[..., list[ClaimRun]]) -> Callable[..., list[ClaimRun]]:
        SYSTEMS.add(name, RegisteredSystem(label, fn, fixed_new_tokens, pair))
        return fn

    return deco


def system_names() -> tuple[str, ...]:
    """Every system by name, read when asked, so a system registered anywhere is an
    ``evaluate.systems`` and a ``debate.pool[i].system`` name."""
    return tuple(SYSTEMS)


@system(HARIS, "HARIS", pair=True)
def haris_runs(claims: list[str], reason_llm, retriever, *, top_k: int, max_new_tokens: int, max_turns: int,
               temperature: float = 0.0, seed: int | None = None, search_llm=None) -> list[ClaimRun]:
    """HARIS (``factrl.agents.haris``) over ``claims`` with both agents at the same per-turn and
    per-rollout limits; ``search_llm`` None: the reasoning agent's model searches too. Each run carries
    its grounding (the retriever is recorded for the batch, so citations come from each claim's own
    searches, as ``factrl serve`` cites them)."""
    if isinstance(retriever, RetrieverTool):  # a tool handed in: record the retriever behind it
        recorder = RecordingRetriever(retriever.retriever)
        searcher = RetrieverTool(recorder, k=retriever.k, stop_tag=retriever.stop_tag)
    else:
        recorder = searcher = RecordingRetriever(retriever)
    haris = Haris.with_limits(reason_llm, searcher, search_llm=search_llm, top_k=top_k,
                              max_new_tokens=max_new_tokens, max_turns=max_turns, temperature=temperature,
                              seed=seed_for(temperature, seed))
    out = []
    for res in haris.verify(list(claims)):
        searches = [s for s in res.searches if s is not None]
        evidence = run_evidence(res, recorder.hits)
        trajs = [("reasoning", res.trajectory, res.parse.format_valid)]
        trajs += [("search", s.trajectory, s.parse.format_valid) for s in searches]
        out.append(ClaimRun(
            verdict=res.verdict, questions=res.trajectory.num_tool_calls,
            searches=sum(s.trajectory.num_tool_calls for s in searches),
            format_valid=res.parse.format_valid, trajectories=trajs, raw_confidence=res.raw_confidence,
            text=res.trajectory.response_text, error=res.parse.error,
            grounding=evidence.grounding(), searched=evidence.searched, result=res, evidence=evidence,
        ))
    return out


# Counts: the single agent asks no questions and searches as it decides; RAG searches once (the
# claim); Decompose-Then-Verify checks every sub-claim (counted as questions) with one search each.
# Budgets: the single agent reasons in turns, so the caller's per-turn budget applies; RAG's one call
# replies "Verdict: Support" and Decompose-Then-Verify's decomposition is at most MAX_SUBCLAIMS short
# lines, so those budgets are the method's (VERIFY_PARAMS: 16 tokens; DECOMPOSE_PARAMS: 96): more
# tokens only let a small model ramble past what the parser reads. Decompose-Then-Verify samples its
# decomposition; its per-sub-claim verification calls stay greedy (VERIFY_PARAMS).


@system("single_agent", "Single agent")
def single_agent(claims: list[str], llm, retriever, *, top_k: int, max_new_tokens: int, max_turns: int,
                 temperature: float = 0.0, seed: int | None = None) -> list[ClaimRun]:
    params = baselines.default_single_agent_params(max_new_tokens=max_new_tokens, max_turns=max_turns,
                                                   temperature=temperature, seed=seed_for(temperature, seed))
    results = baselines.single_agent(claims, llm=llm, retriever=retriever, k=top_k, params=params)
    return [ClaimRun(verdict=r.verdict, searches=r.trajectory.num_tool_calls, format_valid=r.parse.format_valid,
                     trajectories=[("single_agent", r.trajectory, r.parse.format_valid)],
                     text=r.trajectory.response_text, error=r.parse.error) for r in results]


@system("rag", "RAG", fixed_new_tokens=VERIFY_PARAMS.max_tokens)
def rag(claims: list[str], llm, retriever, *, top_k: int, max_new_tokens: int, max_turns: int,
        temperature: float = 0.0, seed: int | None = None) -> list[ClaimRun]:
    params = SamplingParams(max_tokens=max_new_tokens, temperature=temperature, seed=seed_for(temperature, seed))
    results = baselines.rag(claims, llm=llm, retriever=retriever, k=top_k, params=params)
    return [_call_run(r, searches=len(r.contexts), agent="rag",
                      text=f"From the claim's top passages: {r.contexts[0] if r.contexts else ''}") for r in results]


@system("decompose_verify", "Decomp-Verify", fixed_new_tokens=baselines.DECOMPOSE_PARAMS.max_tokens)
def decompose_verify(claims: list[str], llm, retriever, *, top_k: int, max_new_tokens: int, max_turns: int,
                     temperature: float = 0.0, seed: int | None = None) -> list[ClaimRun]:
    params = SamplingParams(max_tokens=max_new_tokens, temperature=temperature, seed=seed_for(temperature, seed))
    results = baselines.decompose_then_verify(claims, llm=llm, retriever=retriever, k=top_k, params=params)
    return [_call_run(r, questions=len(r.subclaims), searches=len(r.contexts), agent="decompose_verify",
                      text="; ".join(f"{s} -> {verdict_word(v)}" for s, v in zip(r.subclaims, r.sub_verdicts)))
            for r in results]


def _call_run(result, *, agent: str, text: str, questions: int = 0, searches: int = 0) -> ClaimRun:
    """The run of a baseline made of single LLM calls: valid when it reached a verdict."""
    valid = result.verdict is not None
    error = "; ".join(result.errors) or (None if valid else "no verdict")
    return ClaimRun(verdict=result.verdict, questions=questions, searches=searches, format_valid=valid,
                    trajectories=[(agent, _call_trace(result), valid)], text=text, error=error)


def _call_trace(result) -> Trajectory:
    """A trace of a baseline made of single LLM calls (no token ids): per verification, the context
    it read (env) and the parsed verdict (model); sub-claims first for Decompose-Then-Verify."""
    turns: list[tuple[str, str]] = [("env", f"Claim: {result.claim}")]
    if result.subclaims:
        turns.append(("model", "sub-claims:\n" + "\n".join(f"- {s}" for s in result.subclaims)))
    verdicts = result.sub_verdicts or [result.verdict]
    for i, context in enumerate(result.contexts):
        head = f"sub-claim: {result.subclaims[i]}\n" if result.subclaims else ""
        turns.append(("env", f"{head}context:\n{context}"))
        turns.append(("model", f"verdict: {verdicts[i] if i < len(verdicts) else None}"))
    for err in result.errors:
        turns.append(("model", f"error: {err}"))
    turns.append(("model", f"final verdict: {result.verdict}"))
    return Trajectory(prompt_ids=[], response_ids=[], loss_mask=[], turns=turns,
                      response_text="".join(t for _, t in turns), num_tool_calls=len(result.contexts),
                      finish_reason="stop")
