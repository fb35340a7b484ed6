"""M2R's rule-based rewards (micro-macro retrieval paper, eq. 5-6).

The answer reward mixes three token-F1 scores: the final answer (values in ``\\boxed{}``) against the
gold answer, the saved key information against the gold answer, and the final answer against the
saved key information: ``r_ans = s_final + alpha * s_key + beta * s_cons`` (alpha = 1/3, beta = 1/10
in the paper). The rollout reward is ``r_ans`` when the final answer overlaps the gold one at all,
0.1 when it does not but the format is right, and 0 otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from factrl.rewards.registry import RewardResult, register
from factrl.text import max_token_f1

FORMAT_REWARD = 0.1
ALPHA = 1 / 3
BETA = 1 / 10


def boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, content)`` of every ``\\boxed{...}`` in ``text`` (nested braces balanced)."""
    out: list[tuple[int, int, str]] = []
    start = 0
    while (i := text.find("\\boxed{", start)) != -1:
        j = i + len("\\boxed{")
        depth, k = 1, j
        while k < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        if depth:  # no closing brace: nothing more to extract
            break
        out.append((i, k, text[j : k - 1].strip()))
        start = k
    return out


def extract_boxed(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` in ``text``, in order."""
    return [content for _, _, content in boxed_spans(text)]


@register("m2r")
def m2r_reward(
    final_answer: str | None,
    gold_answers: Sequence[str],
    *,
    format_valid: bool,
    key_info: Sequence[str] = (),
    alpha: float = ALPHA,
    beta: float = BETA,
) -> RewardResult:
    """Eq. 5-6. ``final_answer``: the boxed values joined (None if absent); ``key_info``: saved values.

    With no key information (the claim-verification setting), ``r_ans`` reduces to the final-answer F1.
    """
    answer = final_answer or ""
    s_final = max_token_f1(answer, list(gold_answers))
    s_key = max((max_token_f1(v, list(gold_answers)) for v in key_info), default=0.0)
    s_cons = max_token_f1(answer, list(key_info)) if answer else 0.0
    r_ans = s_final + alpha * s_key + beta * s_cons
    if s_final > 0:
        score = r_ans
    elif format_valid:
        score = FORMAT_REWARD
    else:
        score = 0.0
    parts = {"s_final": s_final, "s_key": s_key, "s_cons": s_cons, "r_ans": r_ans, "format": float(format_valid)}
    return RewardResult(score=score, parts=parts, format_valid=format_valid)
