"""The systems ``evaluate`` compares: HARIS at a checkpoint pair and the registered baselines.

A system takes a batch of claim texts and the retriever to search and returns one :class:`ClaimRun`
per claim (the verdict, the questions and searches behind it, the trajectories, a raw confidence).
:class:`HarisSystem` runs HARIS (``factrl.agents.haris``) at one (reasoning, search) pair; the
baselines (single agent, RAG, Decompose-Then-Verify; ``factrl.agents.baselines``) are registered by
name in :data:`BASELINES` and run as :class:`BaselineSystem`. :func:`build_systems` makes the systems
params ``evaluate.systems`` (or ``--systems``) names, :func:`load_llm` the LLM of a model spec, and
:func:`run_system` runs a system over many claims in batches, :func:`free_engine_memory` dropping its
engines' caches afterwards. The evaluation itself is ``factrl.eval.runner``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from factrl.agents.rollout import Trajectory
from factrl.registry import Registry


@dataclass
class ClaimRun:
    """One system's work on one claim.

    verdict: "SUPPORTS" | "REFUTES" | None (no verdict: a malformed or unfinished response).
    questions: questions asked to a search agent (HARIS) or sub-claims checked (Decompose-Then-Verify).
    searches: retriever calls made for the claim, over all agents.
    trajectories: (agent, trajectory, format_valid) of every rollout behind the verdict.
    raw_confidence: the system's own probability that ``verdict`` is right, in [0, 1] (HARIS: the
        verdict token's, ``factrl.agents.confidence``; 0.0 without a verdict); None for systems
        that give none (the baselines). Uncalibrated: ``factrl.eval.calibration`` maps it.
    """

    verdict: str | None
    questions: int = 0
    searches: int = 0
    format_valid: bool | None = None
    trajectories: list[tuple[str, Trajectory, bool | None]] = field(default_factory=list)
    raw_confidence: float | None = None


class System(Protocol):
    """A claim verifier: ``run`` takes a batch of claim texts and the retriever to search."""

    name: str

    def run(self, claims: list[str], retriever) -> list[ClaimRun]:
        ...


@dataclass
class HarisSystem:
    """HARIS at one (reasoning, search) checkpoint pair (``factrl.agents.haris``)."""

    name: str
    reason_llm: Any
    search_llm: Any
    top_k: int = 3
    max_new_tokens: int = 64
    max_turns: int = 2

    @property
    def llms(self) -> tuple:
        return (self.reason_llm, self.search_llm)

    def run(self, claims: list[str], retriever) -> list[ClaimRun]:
        from factrl.agents.haris import Haris

        haris = Haris.with_limits(self.reason_llm, retriever, search_llm=self.search_llm, top_k=self.top_k,
                                  max_new_tokens=self.max_new_tokens, max_turns=self.max_turns)
        out = []
        for res in haris.verify(list(claims)):
            searches = [s for s in res.searches if s is not None]
            trajs = [("reasoning", res.trajectory, res.parse.format_valid)]
            trajs += [("search", s.trajectory, s.parse.format_valid) for s in searches]
            out.append(ClaimRun(
                verdict=res.verdict, questions=res.trajectory.num_tool_calls,
                searches=sum(s.trajectory.num_tool_calls for s in searches),
                format_valid=res.parse.format_valid, trajectories=trajs, raw_confidence=res.raw_confidence,
            ))
        return out


@dataclass(frozen=True)
class Baseline:
    """A registered baseline: its name in the report (HARIS rows are named by their checkpoint) and
    ``run(claims, llm, retriever, *, top_k, max_new_tokens, max_turns) -> [ClaimRun]`` over a batch."""

    label: str
    run: Callable[..., list[ClaimRun]]


BASELINES: Registry[Baseline] = Registry("baseline")


def baseline(name: str, label: str) -> Callable:
    """Decorator registering a baseline's batch function in :data:`BASELINES` as ``name``."""

    def deco(fn: Callable[..., list[ClaimRun]]) -> Callable[..., list[ClaimRun]]:
        BASELINES.add(name, Baseline(label, fn))
        return fn

    return deco


# Counts: the single agent asks no questions and searches as it decides; RAG searches once (the
# claim); Decompose-Then-Verify checks every sub-claim (counted as questions) with one search each.


@baseline("single_agent", "Single agent")
def single_agent(claims: list[str], llm, retriever, *, top_k: int, max_new_tokens: int,
                 max_turns: int) -> list[ClaimRun]:
    from factrl.agents import baselines

    params = baselines.default_single_agent_params(max_new_tokens=max_new_tokens, max_turns=max_turns)
    results = baselines.single_agent(claims, llm=llm, retriever=retriever, k=top_k, params=params)
    return [ClaimRun(verdict=r.verdict, searches=r.trajectory.num_tool_calls, format_valid=r.parse.format_valid,
                     trajectories=[("single_agent", r.trajectory, r.parse.format_valid)]) for r in results]


@baseline("rag", "RAG")
def rag(claims: list[str], llm, retriever, *, top_k: int, max_new_tokens: int, max_turns: int) -> list[ClaimRun]:
    from factrl.agents import baselines

    results = baselines.rag(claims, llm=llm, retriever=retriever, k=top_k)
    return [ClaimRun(verdict=r.verdict, searches=len(r.contexts), format_valid=r.verdict is not None,
                     trajectories=[("rag", _call_trace(r), r.verdict is not None)]) for r in results]


@baseline("decompose_verify", "Decomp-Verify")
def decompose_verify(claims: list[str], llm, retriever, *, top_k: int, max_new_tokens: int,
                     max_turns: int) -> list[ClaimRun]:
    from factrl.agents import baselines

    results = baselines.decompose_then_verify(claims, llm=llm, retriever=retriever, k=top_k)
    return [ClaimRun(verdict=r.verdict, questions=len(r.subclaims), searches=len(r.contexts),
                     format_valid=r.verdict is not None,
                     trajectories=[("decompose_verify", _call_trace(r), r.verdict is not None)]) for r in results]


def system_names() -> tuple[str, ...]:
    """What params ``evaluate.systems`` and ``--systems`` may name: ``haris`` and every baseline in
    :data:`BASELINES`, read when asked, so a baseline registered anywhere counts without a list to edit."""
    return ("haris", *BASELINES)


@dataclass
class BaselineSystem:
    """The baseline registered as ``kind`` in :data:`BASELINES` on one LLM (``factrl.agents.baselines``)."""

    name: str
    kind: str
    llm: Any
    top_k: int = 3
    max_new_tokens: int = 64
    max_turns: int = 2

    @property
    def llms(self) -> tuple:
        return (self.llm,)

    def run(self, claims: list[str], retriever) -> list[ClaimRun]:
        return BASELINES.lookup(self.kind).run(list(claims), self.llm, retriever, top_k=self.top_k,
                                               max_new_tokens=self.max_new_tokens, max_turns=self.max_turns)


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


def build_systems(names: Sequence[str], checkpoints: Sequence[tuple[str, str, str]], base_model: str, *,
                  load_llm: Callable[[str], Any], top_k: int = 3, max_new_tokens: int = 64,
                  max_turns: int = 2) -> list[System]:
    """Systems by name; ``haris`` once per ``(name, reason, search)`` checkpoint; the baselines on
    ``base_model``. ``load_llm`` maps a model spec to an LLM (called once per distinct spec)."""
    known = system_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown system(s) {unknown}; expected some of {list(known)}")
    cache: dict[str, Any] = {}

    def llm(spec: str):
        if spec not in cache:
            cache[spec] = load_llm(spec)
        return cache[spec]

    limits = {"top_k": top_k, "max_new_tokens": max_new_tokens, "max_turns": max_turns}
    systems: list[System] = []
    for name in names:
        if name == "haris":
            if not checkpoints:
                raise ValueError("system 'haris' needs at least one checkpoint")
            systems += [HarisSystem(label, llm(reason), llm(search), **limits) for label, reason, search in checkpoints]
        else:
            systems.append(BaselineSystem(BASELINES[name].label, name, llm(base_model), **limits))
    return systems


def run_system(system: System, claims: list[str], retriever, batch_size: int) -> list[ClaimRun]:
    """``system`` over ``claims`` in batches of ``batch_size`` (one batched rollout each)."""
    out: list[ClaimRun] = []
    for start in range(0, len(claims), max(1, batch_size)):
        batch = claims[start : start + batch_size]
        runs = system.run(batch, retriever)
        if len(runs) != len(batch):
            raise RuntimeError(f"system {system.name!r} returned {len(runs)} results for {len(batch)} claims")
        out += runs
    return out


def free_engine_memory(system: System) -> None:
    """Drop the key/value slots and prefix cache of the local engines behind ``system``.

    Every LLM of every evaluated checkpoint stays loaded for the whole run (the weights are
    small and shared by spec), but each engine keeps up to ``max_batch`` slots of key/value states
    and a prefix cache of up to 2 GiB: one warmed HARIS pair alone reached 10-12 GB of RSS on the
    demo, and every checkpoint's engines kept theirs until the run ended. A system's engines are
    idle once it has scored its claims, so their caches go; weights stay."""
    for llm in getattr(system, "llms", ()):  # systems without local engines (test fakes) have none
        if hasattr(llm, "release"):
            llm.release()
        if hasattr(llm, "clear_prefix_cache"):
            llm.clear_prefix_cache()


def load_llm(spec: str, device="auto", precision: str = "auto"):
    """The LLM of an LLM spec: a local engine for a model directory or an embedded name (on
    ``device``, with ``precision`` weights), or an OpenAI-compatible endpoint (``openai:MODEL@URL``; see
    ``factrl.llm.backends``) behind the on-disk LLM cache: evaluation decodes greedily, so a rerun of
    an evaluation against a paid API is answered from the cache and pays nothing."""
    from factrl.llm.backends import load_llm as load
    from factrl.llm.cache import DiskCache

    return load(spec, device=device, precision=precision, disk_cache=DiskCache())
