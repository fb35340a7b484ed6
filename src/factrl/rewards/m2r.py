"""M2R's rule-based rewards (micro-macro retrieval paper, eq. 5-6).

The answer reward mixes three token-F1 scores: the final answer (values in ``\\boxed{}``) against the
gold answer, the saved key information against the gold answer, and the final answer against the
saved key information: ``r_ans = s_final + alpha * s_key + beta * s_cons`` (alpha = 1/3, beta = 1/10
in the paper). The rollout reward is ``r_ans`` when the final answer overlaps the gold one at all,
0.1 when it does not but the format is right, and 0 otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from factrl.rewards.registry import RewardFamily, RewardKind, RewardResult
from factrl.text import max_token_f1

REWARDS = RewardFamily("m2r")  # m2r (answer)
FORMAT_REWARD = 0.1
ALPHA = 1 / 3
BETA = 1 / 10


@REWARDS.register("m2r", RewardKind.ANSWER)
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
