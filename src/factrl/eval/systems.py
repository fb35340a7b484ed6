"""The systems ``evaluate`` compares: HARIS at each checkpoint pair and the other registered systems.

A system takes a batch of claim texts and the retriever to search and returns one :class:`ClaimRun`
per claim (the verdict, the questions and searches behind it, the trajectories, a raw confidence).
The systems and their settings are registered once, in ``factrl.agents.systems_registry`` (the
debate's members and ``factrl serve`` answer with the same entries); :class:`ModelSystem` runs one
entry on its model(s): a pair system (HARIS) once per (reasoning, search) checkpoint pair, the
others (single agent, RAG, Decompose-Then-Verify) on the base model. :func:`build_systems` makes the
systems params ``evaluate.systems`` (or ``--systems``) names, :func:`load_llm` the LLM of a model
spec, and :func:`run_system` runs a system over many claims in batches, :func:`free_engine_memory`
dropping its engines' caches afterwards. The evaluation itself is ``factrl.eval.runner``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from factrl.agents.systems_registry import SYSTEMS, ClaimRun, system_names


class System(Protocol):
    """A claim verifier: ``run`` takes a batch of claim texts and the retriever to search."""

    name: str

    def run(self, claims: list[str], retriever) -> list[ClaimRun]:
        ...


@dataclass
class ModelSystem:
    """The system registered as ``kind`` in :data:`SYSTEMS`, named ``name`` in the report, on ``llm``
    (and ``search_llm``, a pair system's search model)."""

    name: str
    kind: str
    llm: Any
    search_llm: Any = None
    top_k: int = 3
    max_new_tokens: int = 64
    max_turns: int = 2
    # the model specs behind llm (and search_llm), from build_systems: what a worker process
    # (factrl.eval.workers) loads the system's models from; () for a system built from LLM objects
    specs: tuple[str, ...] = ()

    @property
    def llms(self) -> tuple:
        return (self.llm,) if self.search_llm is None else (self.llm, self.search_llm)

    @property
    def pair(self) -> bool:
        """Whether it is a pair system (HARIS): evaluated per checkpoint, with a raw confidence."""
        return SYSTEMS.lookup(self.kind).pair

    def run(self, claims: list[str], retriever) -> list[ClaimRun]:
        return SYSTEMS.lookup(self.kind).answer(claims, self.llm, retriever, search_llm=self.search_llm,
                                                top_k=self.top_k, max_new_tokens=self.max_new_tokens,
                                                max_turns=self.max_turns)


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
        if SYSTEMS[name].pair:
            if not checkpoints:
                raise ValueError(f"system {name!r} needs at least one checkpoint")
            systems += [ModelSystem(label, name, llm(reason), llm(search), **limits, specs=(reason, search))
                        for label, reason, search in checkpoints]
        else:
            systems.append(ModelSystem(SYSTEMS[name].label, name, llm(base_model), **limits, specs=(base_model,)))
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
