"""NOT ENOUGH INFO from a run's evidence (factrl.agents.abstain): the grounding rule on crafted runs,
where a citation about another entity must not count, and the decision's rules one by one."""

from __future__ import annotations

import pytest

from factrl.agents.abstain import (
    AbstainParams,
    CitedSentence,
    DevRun,
    choose_rules,
    content_words,
    decide,
    grounding,
    mentions,
    named_entities,
)
from factrl.config import ConfigError
from factrl.verdicts import NOT_ENOUGH_INFO, REFUTES, SUPPORTS


def rules(**changes) -> AbstainParams:
    """The rules these tests were written against (the subject rule and half the questions answered,
    nothing on the passages read), with ``changes``; the shipped defaults are bench/abstain.py's choice."""
    return AbstainParams(**{"require_subject": True, "min_answered_share": 0.5, "min_read_share": 0.0, **changes})


CLAIM = "Orlen Studios is based in Varna."
QUESTION = "Where is Orlen Studios based?"
# the case: the search found a different company's passage, sharing "Studios", "based" and "Varna"
OTHER_ENTITY = CitedSentence("Hatur Studios is based in Varna.", "Hatur Studios", QUESTION)
OWN_ENTITY = CitedSentence("Orlen Studios is based in Tessik.", "Orlen Studios", QUESTION)


def naive_grounded(claim: str, cited: list[CitedSentence]) -> bool:
    """The rule this module must not be: any citation sharing content words with the claim grounds it."""
    return any(content_words(claim) & content_words(c.text) for c in cited)


def rule_grounded(claim: str, cited: list[CitedSentence]) -> bool:
    g = grounding(claim, cited, [QUESTION])
    return not decide(REFUTES, g, 0.95, rules()).abstained


@pytest.mark.parametrize("is_grounded", [rule_grounded, pytest.param(naive_grounded, marks=pytest.mark.xfail(
    strict=True, reason="the naive content-word rule counts a citation about another entity"))])
def test_a_citation_about_another_entity_does_not_ground_the_claim(is_grounded):
    assert not is_grounded(CLAIM, [OTHER_ENTITY])
    assert is_grounded(CLAIM, [OWN_ENTITY])  # the claim's own subject, even with another city: a refutation


def test_named_entities_are_whole_runs_of_capitalised_words():
    assert named_entities("The developer of the game Cural: Quest is headquartered in Fites.") == ["Cural: Quest", "Fites"]
    assert named_entities("Paris is the capital of France.") == ["Paris", "France"]
    assert named_entities("In which city was Ilse Parrow born?") == ["Ilse Parrow"]
    assert named_entities("the sky is blue") == []
    assert mentions("Orlen Studios", "Doc about Orlen Studios.") and not mentions("Orlen Studios", "Hatur Studios")
    assert not mentions("Varna", "Varnas is a city")  # whole words only


def test_paris_with_citations_about_demo_entities_is_not_enough_info():
    cited = [CitedSentence("Kovir Group is headquartered in Lomes.", "Kovir Group", "What is the capital of France?")]
    g = grounding("Paris is the capital of France.", cited, ["What is the capital of France?"])
    d = decide(SUPPORTS, g, 0.94, rules())
    assert d.verdict == NOT_ENOUGH_INFO and d.model_verdict == SUPPORTS and d.abstained
    assert any("'Paris'" in r for r in d.reasons)
    # and with no citation at all (the Citations (0))
    assert decide(SUPPORTS, grounding("Paris is the capital of France.", [], []), 0.94, rules()).abstained


def test_a_two_hop_run_answered_from_retrieved_text_keeps_its_verdict():
    claim = "The founder of Orlen Studios was born in Varna."
    questions = ["Who founded Orlen Studios?", "In which city was Ilse Parrow born?"]
    cited = [CitedSentence("Orlen Studios was founded by Ilse Parrow.", "Orlen Studios", questions[0]),
             CitedSentence("Ilse Parrow was born in Tessik.", "Ilse Parrow", questions[1])]
    g = grounding(claim, cited, questions)
    assert g.subject == "Orlen Studios" and g.subject_cited and g.answered == 2
    assert decide(REFUTES, g, 0.8, rules()) == decide(REFUTES, g, 0.8, rules(enabled=False))
    # the second question answered by a sentence about someone else: half answered
    off = [cited[0], CitedSentence("Teti Hasis was born in Tessik.", "Teti Hasis", questions[1])]
    g = grounding(claim, off, questions)
    assert g.answered == 1
    assert decide(REFUTES, g, 0.8, rules(min_answered_share=1.0)).abstained
    assert not decide(REFUTES, g, 0.8, rules(min_answered_share=0.5)).abstained


def test_each_rule_is_a_param():
    g = grounding(CLAIM, [OWN_ENTITY], [QUESTION])
    assert not decide(REFUTES, g, 0.55, rules()).abstained
    assert decide(REFUTES, g, 0.55, rules(min_confidence=0.6)).abstained
    assert decide(REFUTES, g, 0.55, rules(min_entity_share=1.0)).abstained  # Varna is not cited
    other = grounding(CLAIM, [OTHER_ENTITY], [QUESTION])
    assert not decide(REFUTES, other, 0.9, rules(require_subject=False, min_answered_share=0)).abstained
    # no entities: content words decide
    plain = grounding("the sky is blue", [CitedSentence("The sky is blue by day.", None, "")], [])
    assert not decide(SUPPORTS, plain, 0.9, rules(min_answered_share=0)).abstained
    assert decide(SUPPORTS, grounding("the sky is blue", [], []), 0.9, rules(min_answered_share=0)).abstained
    # a run without a verdict: NOT ENOUGH INFO when its evidence fails a rule (its searches found passages
    # about something else), without a verdict when its evidence stands (the model failed, not the corpus)
    gave_up = decide(None, other, None, rules(min_confidence=0.9))
    assert gave_up.verdict == NOT_ENOUGH_INFO and gave_up.abstained and gave_up.model_verdict is None
    assert not any("confidence" in r for r in gave_up.reasons)  # no verdict to be confident in
    failed = decide(None, g, None, rules(min_confidence=0.9))
    assert failed.verdict is None and not failed.abstained
    assert decide(None, other, None, rules(enabled=False)).verdict is None
    with pytest.raises(ConfigError, match="abstain.min_confidence"):
        rules(min_confidence=1.5)


def test_choose_rules_picks_the_combination_that_separates_a_dev_mix():
    own, other = grounding(CLAIM, [OWN_ENTITY], [QUESTION]), grounding(CLAIM, [OTHER_ENTITY], [QUESTION])
    runs = [DevRun(REFUTES, REFUTES, own, 0.9)] * 10 + [DevRun(NOT_ENOUGH_INFO, SUPPORTS, other, 0.9)] * 10
    params, score = choose_rules(runs)
    assert score == {"utility": 1.0, "accuracy": 1.0, "coverage": 1.0}
    assert params.require_subject or params.min_answered_share > 0
    assert params.min_confidence == 0  # confidence does not separate them: left off (fewer rules)


def test_choose_rules_prefers_not_enough_info_to_a_wrong_verdict():
    """Abstaining on an answerable claim loses coverage; a wrong verdict misleads. Mix accuracy counts
    both as one error (and would keep the rule off: fewer rules); the utility the choice uses does not."""
    from factrl.agents.abstain import mix_accuracy, mix_utility

    own = grounding(CLAIM, [OWN_ENTITY], [QUESTION])
    half = grounding(CLAIM, [OWN_ENTITY], [QUESTION, "Who founded Orlen Studios?"])  # 1 of 2 answered
    other = grounding(CLAIM, [OTHER_ENTITY], [QUESTION])
    runs = ([DevRun(REFUTES, REFUTES, own, 0.9)] * 19 + [DevRun(REFUTES, SUPPORTS, half, 0.9)]
            + [DevRun(NOT_ENOUGH_INFO, SUPPORTS, other, 0.9)] * 10)
    lenient, strict = rules(min_answered_share=0.0), rules(min_answered_share=1.0)
    assert mix_accuracy(runs, lenient)[0] == mix_accuracy(runs, strict)[0]
    assert mix_utility(runs, strict) > mix_utility(runs, lenient)
    params, score = choose_rules(runs)
    assert params.min_answered_share == 1.0 and score["coverage"] == 0.95
    # unless the coverage it costs is more than allowed: then the lenient rules stand
    assert choose_rules(runs, min_coverage=0.96)[0].min_answered_share < 1.0


def test_what_the_searches_read_counts_apart_from_what_was_cited():
    """The 135M search agent's report may quote no sentence naming the claim's subject although its
    search read the subject's passage: min_read_share reads the passages themselves; an out-of-corpus
    claim reads none of its entities whatever the reports say."""
    read = ["Orlen Studios. Orlen Studios is a film company founded by Ilse Parrow.", "Varna. Varna is a city."]
    g = grounding(CLAIM, [], [QUESTION], read=read)
    assert g.entity_share == 0.0 and g.read_entity_share == 1.0
    assert not decide(REFUTES, g, 0.9, rules(require_subject=False, min_answered_share=0,
                                                     min_read_share=1.0)).abstained
    elsewhere = grounding(CLAIM, [OTHER_ENTITY], [QUESTION], read=["Hatur Studios. Hatur Studios is based in Varna."])
    assert elsewhere.read_entity_share == 0.5
    d = decide(SUPPORTS, elsewhere, 0.9, rules(require_subject=False, min_answered_share=0, min_read_share=1.0))
    assert d.abstained and any("passages read mention 50%" in r for r in d.reasons)
    assert grounding(CLAIM, [], [QUESTION]).read_entity_share is None  # nothing recorded: the rule reads 0
    assert decide(REFUTES, grounding(CLAIM, [], [QUESTION]), 0.9, rules(
        require_subject=False, min_answered_share=0, min_read_share=0.5)).abstained
