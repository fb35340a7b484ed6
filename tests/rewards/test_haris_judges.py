"""R_low with the project's real judges: the rule judge, and the LLM judge on the embedded SmolLM2."""

from __future__ import annotations

import pytest

from factrl.rewards.haris import search_rewards
from factrl.signatures import LLMJudge, RuleJudge, make_judge

QUESTION = "In which city was the physicist Lise Meitner born?"
ANSWER = "Vienna"
VALID = (
    "<think>Look up her birthplace.</think><search>Lise Meitner birthplace</search>"
    "<result>Lise Meitner (born 7 November 1878 in Vienna) was an Austrian-Swedish physicist.</result>"
    "<report>{report}</report>"
)
RESPONSES = [
    VALID.format(report="Lise Meitner was born in Vienna, Austria, on 7 November 1878."),
    VALID.format(report="Lise Meitner worked on nuclear fission with Otto Hahn in Berlin."),
    "She was born in Vienna.",  # right content, no protocol: invalid format
]


def test_rule_judge_gives_one_point_one_and_zero():
    out = search_rewards(RESPONSES, [QUESTION] * 3, [ANSWER] * 3, make_judge("rule"))
    assert [r.score for r in out] == [1.0, 0.1, 0.0]
    assert isinstance(make_judge("rule"), RuleJudge)


@pytest.mark.slow  # ~45 s on the shared 2-core machine (model load, judge retries)
def test_llm_judge_on_smollm2_drives_the_reward():
    from factrl.llm.local import LocalLLM

    judge = LLMJudge(LocalLLM("smollm2-135m", max_batch=4))
    out = search_rewards(RESPONSES, [QUESTION] * 3, [ANSWER] * 3, judge)
    # only the two well-formed reports reached the model, in one batch
    assert judge.calls == 2 and len(judge.last) == 2
    expected = [1.0 if j.useful else 0.1 for j in judge.last] + [0.0]
    assert [r.score for r in out] == expected
    assert [r.parts["useful"] for r in out[:2]] == [float(bool(j.useful)) for j in judge.last]
    assert all(r.format_valid for r in out[:2]) and not out[2].format_valid


def test_unanswerable_pseudo_answer_is_rejected():
    with pytest.raises(ValueError, match="item 0: the pseudo answer is None"):
        search_rewards(RESPONSES[:1], [QUESTION], [None], make_judge("rule"))
