"""One HARIS checkpoint pair as the service's verifier: a batch of claims in, one JSON-able result each.

The claims of a batch run through the HARIS entry of ``factrl.agents.systems_registry`` in one call
(as ``evaluate`` and a debate run it), so the project's scheduler batches every agent turn of every
claim on the shared engines. That entry records the retriever for the batch
(:class:`factrl.agents.evidence.RecordingRetriever`), so each search rollout's hits are known by id:
citations come only from those (``factrl.agents.citations``), and only from passages whose text was
in the answer that rollout read.

A result (:meth:`HarisVerifier.verify`): ``verdict`` (SUPPORTS / REFUTES / NOT ENOUGH INFO / None),
``model_verdict`` (what the reasoning agent wrote), ``abstained`` and ``abstention`` (when the run's
evidence does not bear on the claim, ``factrl.agents.abstain``: the failed rules, what was searched, the
grounding measured, the rules in force), ``raw_confidence``, ``citations``, ``trace`` (every question, its searches, the passages found, the report, and the
reasoning agent's text), ``usage`` (model calls, tokens in / out, per model) and ``cost_usd``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from factrl.agents.abstain import AbstainParams, decide
from factrl.agents.systems_registry import HARIS, SYSTEMS, ClaimRun
from factrl.service.confidence import raw_confidence
from factrl.service.usage import Usage, cost_usd, trajectory_usage

__all__ = ["HarisVerifier", "load_verifiers"]

log = logging.getLogger(__name__)


@dataclass
class HarisVerifier:
    """HARIS at one checkpoint pair over one retriever. ``reason_model`` / ``search_model`` are the
    LLM specs (what the price table is keyed by); limits as ``evaluate``'s."""

    name: str
    reason_llm: Any
    search_llm: Any
    retriever: Any
    reason_model: str
    search_model: str
    top_k: int = 3
    max_turns: int = 5
    max_new_tokens: int = 64
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    abstain: AbstainParams = field(default_factory=AbstainParams)
    calibration: Any = None  # factrl.service.confidence.Calibration: the confidence the abstain rule reads

    def verify(self, claims: list[str]) -> list[dict]:
        """One result per claim (see the module docstring), in order; a batch is one HARIS call."""
        started = time.perf_counter()
        runs = SYSTEMS.lookup(HARIS).answer(list(claims), self.reason_llm, self.retriever, search_llm=self.search_llm,
                                            top_k=self.top_k, max_new_tokens=self.max_new_tokens,
                                            max_turns=self.max_turns)
        seconds = time.perf_counter() - started
        return [self._result(claim_run, seconds, len(claims)) for claim_run in runs]

    def _result(self, claim_run: ClaimRun, seconds: float, batch: int) -> dict:
        run, found = claim_run.result, claim_run.evidence  # HARIS's own result and evidence
        assert run is not None and found is not None, "the HARIS system returns its result and evidence"
        raw = raw_confidence(run)
        ground = found.grounding()
        confidence = raw if self.calibration is None or raw is None else self.calibration.apply([raw], [ground])[0]
        decision = decide(run.verdict, ground, confidence, self.abstain)
        usage = self._usage(run)
        total = Usage()
        for u in usage.values():
            total.add(u)
        return {
            "claim": run.claim,
            "verdict": decision.verdict,
            "model_verdict": run.verdict,
            "abstained": decision.abstained,
            # why a verdict became NOT ENOUGH INFO, and what the run searched for (the page shows both)
            "abstention": {"reasons": list(decision.reasons), "failed_rules": list(decision.rules), "searched": found.searched,
                           "grounding": ground.to_dict(), "rules": self.abstain.rules()},
            "raw_confidence": raw,
            "citations": [c.to_dict() for c in found.citations],
            "trace": {"questions": found.questions, "reasoning": run.trajectory.response_text,
                      "finish_reason": run.trajectory.finish_reason, "format_valid": run.parse.format_valid,
                      "format_error": run.parse.error},
            "usage": {"model_calls": total.calls, "tokens_in": total.tokens_in, "tokens_out": total.tokens_out,
                      "estimated": total.estimated,
                      "by_model": {m: vars(u) for m, u in usage.items()}},
            "cost_usd": cost_usd(usage, self.prices),
            "engine_seconds": seconds,
            "batch_size": batch,
        }

    def _usage(self, run) -> dict[str, Usage]:
        """Usage per model spec: the reasoning trajectory on the reasoning model, the searches on the search one."""
        from factrl.agents.haris import prompt_style, reasoning_messages, search_messages

        def chars(messages) -> int:  # a chat-only trajectory's prompt, for its token estimate
            return sum(len(m["content"]) for m in messages)

        by_model: dict[str, Usage] = {self.reason_model: Usage()}
        by_model.setdefault(self.search_model, Usage())
        reason_style, search_style = prompt_style(self.reason_llm), prompt_style(self.search_llm)
        by_model[self.reason_model].add(
            trajectory_usage(run.trajectory, chars(reasoning_messages(run.claim, reason_style))))
        for search in run.searches:
            if search is not None:
                by_model[self.search_model].add(
                    trajectory_usage(search.trajectory, chars(search_messages(search.question, search_style))))
        return {m: u for m, u in by_model.items() if u.calls or m == self.reason_model}


def load_verifiers(checkpoints: Sequence, retriever, *, load_llm: Callable[[str], Any], top_k: int,
                   max_turns: int, max_new_tokens: int, prices: Mapping[str, tuple[float, float]],
                   abstain: AbstainParams | None = None, calibrations: Mapping[str, Any] | None = None
                   ) -> dict[str, HarisVerifier]:
    """A verifier per resolved checkpoint (``factrl.service.params.ResolvedCheckpoint``), by name;
    ``load_llm(spec)`` is called once per distinct model spec (checkpoints share loaded models);
    ``abstain``: when a verdict becomes NOT ENOUGH INFO; ``calibrations``: each checkpoint's map (by
    name), whose confidence the abstain rule reads."""
    cache: dict[str, Any] = {}

    def llm(spec: str):
        if spec not in cache:
            log.info("serve: loading %s", spec)
            cache[spec] = load_llm(spec)
        return cache[spec]

    return {c.name: HarisVerifier(c.name, llm(c.reason), llm(c.search), retriever, c.reason, c.search,
                                  top_k=top_k, max_turns=max_turns, max_new_tokens=max_new_tokens, prices=prices,
                                  abstain=abstain or AbstainParams(), calibration=(calibrations or {}).get(c.name))
            for c in checkpoints}
