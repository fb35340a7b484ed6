"""HARIS's outcome rewards: R_high for the reasoning agent (eq. 1), R_low for the search agent (eq. 3).

R_high = 1 for the right verdict, 0.1 for a wrong verdict in a valid format, 0 for an invalid format.
R_low  = 1 when the judge finds the report useful for deriving the pseudo answer, 0.1 when it does
not but the format is valid, 0 for an invalid format. The format is checked first: a malformed
response scores 0 whatever it contains, and the judge is only asked about well-formed reports (this
also keeps judge calls off responses that cannot earn anything).

The judge is pluggable: anything with ``judge(items) -> list[bool]`` where each item has the keys
``question``, ``answer`` (pseudo ground truth) and ``gathered`` (the report), e.g.
:class:`factrl.signatures.LLMJudge` (the paper's LLM-as-a-judge) or ``RuleJudge`` (token F1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from factrl.agents.protocol import REFUTES, SUPPORTS, parse_reasoning, parse_search
from factrl.rewards.registry import RewardFamily, RewardKind, RewardResult
from factrl.verdicts import NOT_ENOUGH_INFO

REWARDS = RewardFamily("haris")  # haris_reasoning (claim_verdict), haris_search (search_report)

CORRECT = 1.0
FORMAT_ONLY = 0.1  # the paper's format reward, following ReSearch (Chen et al., 2025)
INVALID = 0.0

# The task is binary (Support / Refute): a claim that is not supported counts as refuted, as HOVER's
# NOT_SUPPORTED does. Gold labels are given in the factrl label set (factrl.verdicts.LABELS).
_GOLD = {SUPPORTS: SUPPORTS, REFUTES: REFUTES, NOT_ENOUGH_INFO: REFUTES}


class JudgeLike(Protocol):
    def judge(self, items: Sequence[dict]) -> list[bool]: ...


def binary_label(label: str) -> str:
    """Gold label -> SUPPORTS / REFUTES; a ValueError for anything outside the factrl label set."""
    try:
        return _GOLD[label]
    except KeyError:
        raise ValueError(f"unknown gold label {label!r}; expected one of {sorted(_GOLD)}") from None


QuestionRule = bool | Literal["per_hop"]


def questions_required(num_hops: int | None, require_question: QuestionRule) -> int:
    """Questions a reasoning response must ask before its verdict counts as a valid format.

    ``require_question`` ("ask before you decide", not in the paper): ``False`` none (the paper);
    ``True`` one on a multi-hop claim; ``"per_hop"`` one per bridge, ``num_hops - 1``. An unknown
    hop count (``None``) or a one-hop claim requires none."""
    hops = num_hops or 0
    if require_question is False or hops < 2:
        return 0
    if require_question == "per_hop":
        return hops - 1
    if require_question is True:
        return 1
    raise ValueError(f"require_question {require_question!r}: expected false, true or 'per_hop'")


@REWARDS.register("haris_reasoning", RewardKind.CLAIM_VERDICT)
def reasoning_reward(response: str, label: str, *, num_hops: int | None = None,
                     require_question: QuestionRule = False) -> RewardResult:
    """R_high of one reasoning-agent response (generated text with injected results) against ``label``.

    ``require_question`` ("ask before you decide", not in the paper; :func:`questions_required`): a
    verdict reached with fewer questions than the rule asks counts as an invalid format (R = 0), so
    guessing can no longer earn the 0.1 format reward or the 1 of a lucky verdict.
    """
    gold = binary_label(label)
    parsed = parse_reasoning(response)
    valid = parsed.format_valid and len(parsed.questions) >= questions_required(num_hops, require_question)
    correct = valid and parsed.verdict == gold
    if not valid:
        score = INVALID
    else:
        score = CORRECT if correct else FORMAT_ONLY
    parts = {"correct": float(correct), "format": float(valid)}
    return RewardResult(score=score, parts=parts, format_valid=valid)


def hops_found(response: str, hop_answers: Sequence[str]) -> float:
    """The share of a claim's gold hop answers (the bridges and the end of its chain) that the
    results injected into ``response`` name: how far along the chain the agent's questions got."""
    from factrl.agents.rollout import RESULT_CLOSE, RESULT_OPEN

    if not hop_answers:
        return 0.0
    results = " ".join(chunk.split(RESULT_CLOSE, 1)[0] for chunk in response.split(RESULT_OPEN)[1:])
    return sum(answer.lower() in results.lower() for answer in hop_answers) / len(hop_answers)


def with_hop_credit(result: RewardResult, response: str, hop_answers: Sequence[str], weight: float) -> RewardResult:
    """Per-hop shaping (StepSearch-style dense credit for search, not in HARIS; off at weight 0):
    a valid-format response earns ``weight`` x :func:`hops_found` on top of its outcome reward, so
    a group whose verdicts all agree still ranks the rollouts that found more of the chain. An
    invalid format earns nothing, as before."""
    if weight <= 0 or not result.format_valid:
        return result
    found = hops_found(response, hop_answers)
    return RewardResult(score=result.score + weight * found, parts=result.parts | {"hops_found": found},
                        format_valid=True)


@REWARDS.register("haris_search", RewardKind.SEARCH_REPORT)
def search_rewards(
    responses: Sequence[str], questions: Sequence[str], answers: Sequence[str], judge: JudgeLike
) -> list[RewardResult]:
    """R_low of a batch of search-agent responses; the judge is called once, on the well-formed ones."""
    if not len(responses) == len(questions) == len(answers):
        raise ValueError(
            f"batch sizes differ: {len(responses)} responses, {len(questions)} questions, {len(answers)} answers"
        )
    parsed = [parse_search(r) for r in responses]
    valid = [i for i, p in enumerate(parsed) if p.format_valid]
    items = []
    for i in valid:
        if answers[i] is None:
            raise ValueError(f"item {i}: the pseudo answer is None (unanswerable pairs are filtered before training)")
        items.append({"question": questions[i], "answer": answers[i], "gathered": parsed[i].report})
    verdicts = list(judge.judge(items)) if items else []
    if len(verdicts) != len(items):
        raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(items)} items")
    useful = dict(zip(valid, (bool(v) for v in verdicts)))
    out = []
    for i, p in enumerate(parsed):
        ok = useful.get(i, False)
        score = INVALID if not p.format_valid else (CORRECT if ok else FORMAT_ONLY)
        out.append(RewardResult(score=score, parts={"useful": float(ok), "format": float(p.format_valid)},
                                format_valid=p.format_valid))
    return out
