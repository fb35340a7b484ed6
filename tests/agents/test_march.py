"""MARCH's roles: number normalisation, the proposer and checker parsers (property-based, malformed
output included), the checker's structural blindness, and episodes on a scripted policy."""

from __future__ import annotations

import inspect
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from factrl.agents import march
from factrl.agents.march import (
    CANNOT_ANSWER,
    Document,
    MarchItem,
    checker_messages,
    checker_text,
    parse_checker,
    parse_proposals,
    proposer_text,
    run_march,
)
from factrl.rewards.march import zero_tolerance_reward
from factrl.text import extract_numbers, normalize_number
from tests.rl.tiny import tokenizer as tiny_tokenizer
from tests.script_llm import ScriptLLM

DOCS = (Document("Kavelo Works", "Kavelo Works was founded by Dira Mot in 1987. Its catalogue lists 12 product lines."),
        Document("Sutar Labs", "Sutar Labs was founded by Ilse Parrow in 1990."))
ITEM = MarchItem("q1", "In which year was Kavelo Works founded?", DOCS, "1987")


# --- numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, number", [
    ("1,200", "1200"), ("1200", "1200"), ("$45", "45"), ("45 dollars", "45"), ("USD 45", "45"), ("45%", "45"),
    ("450 people", "450"), ("12k", "12000"), ("12 thousand", "12000"), ("1.5 million", "1500000"),
    ("1.2 thousand", "1200"), ("forty-five", "45"), ("Forty five", "45"), ("two thousand and five", "2005"),
    ("one hundred and twenty", "120"), ("twelve", "12"), ("3.50", "3.5"), ("about 90 minutes", "90"),
    ("nineteen", "19"), ("[Answer: 1987]", "1987"),
])
def test_normalize_number_reduces_every_spelling_to_one(text, number):
    assert normalize_number(text) == number


@pytest.mark.parametrize("text", ["", "no number here", "between 10 and 20", "five and six", "one of the films",
                                  "cannot answer", None])
def test_normalize_number_is_none_without_exactly_one_number(text):
    assert normalize_number(text) is None


def test_extract_numbers_reads_in_order_and_keeps_digits_out_of_words():
    assert extract_numbers("In 1987, about 450,000 people and twelve films; R2D2 is no number") == \
        ["1987", "450000", "12"]


@given(st.integers(min_value=0, max_value=10**9))
def test_separators_and_units_never_change_a_number(n):
    for spelled in (str(n), f"{n:,}", f"${n:,}", f"{n} dollars", f"about {n:,} people", f"{n}%"):
        assert normalize_number(spelled) == str(n), spelled


# --- the proposer's parser ----------------------------------------------------------------------

_QUESTION = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters="[]\n\r"),
                    min_size=1, max_size=40).filter(lambda q: q.strip())


@given(st.lists(st.tuples(_QUESTION, st.integers(min_value=0, max_value=10**7)), min_size=1, max_size=5))
def test_proposals_round_trip(pairs):
    assume(all(str(n) not in extract_numbers(q) for q, n in pairs))  # stating its own answer is invalid
    parsed = parse_proposals(proposer_text([(q, str(n)) for q, n in pairs]))
    assert parsed.format_valid, parsed.error
    assert parsed.pairs == tuple((q.strip(), str(n)) for q, n in pairs)


@settings(max_examples=300)
@given(st.text(max_size=200))
def test_proposal_parser_never_raises_on_any_text(text):
    parsed = parse_proposals(text)
    assert isinstance(parsed.pairs, tuple)
    assert parsed.format_valid == (parsed.error is None)


@pytest.mark.parametrize("text, valid, pairs", [
    ("- Question: How many tracks does Sola Tapes have? [Answer: 12]", True,
     (("How many tracks does Sola Tapes have?", "12"),)),
    ("1. Question: When was X founded? [Answer: 1,987]\n\n* Question: Price? [Answer: $45]", True,
     (("When was X founded?", "1987"), ("Price?", "45"))),
    ("None", True, ()),
    ("", False, ()),
    ("Sure! Here are the questions:\n- Question: When? [Answer: 1990]", False, (("When?", "1990"),)),
    ("- Question: How long? [Answer: 10-20]", False, ()),  # a range is not one number
    ("- Question: How long? [Answer: Cannot answer]", False, ()),
    ("- Question: unclosed [Answer: 12", False, ()),
    # the hack the first bench run's policy learned: the question hands the checker its answer
    ("- Question: In which year was Kifo Hokun born in Tapen in 1892? [Answer: 1892]", False, ()),
    ("- Question: How many of the 1,200 seats were sold? [Answer: 1200]", False, ()),
    ("- Question: What did it cost in 1990? [Answer: $45]", True, (("What did it cost in 1990?", "45"),)),
])
def test_proposal_parser_on_crafted_output(text, valid, pairs):
    parsed = parse_proposals(text)
    assert (parsed.format_valid, parsed.pairs) == (valid, pairs), parsed.error


# --- the checker's parser -----------------------------------------------------------------------


@given(st.lists(st.one_of(st.integers(min_value=0, max_value=10**7).map(str), st.just(CANNOT_ANSWER)),
                min_size=1, max_size=6))
def test_checker_round_trip(answers):
    parsed = parse_checker(checker_text([("Doc 1 says so.", a) for a in answers]), len(answers))
    assert parsed.format_valid, parsed.error
    assert parsed.answers == tuple(answers)


@settings(max_examples=300)
@given(st.text(max_size=200), st.integers(min_value=0, max_value=4))
def test_checker_parser_never_raises_and_answers_every_question(text, n):
    parsed = parse_checker(text, n)
    assert len(parsed.answers) == n
    assert parsed.format_valid == (parsed.error is None)


def test_checker_parser_on_crafted_output():
    ok = parse_checker("1. Evidence: founded in 1987.\n[Answer: 1987]\n2. Evidence: not there.\n"
                       "[Answer: Cannot answer]", 2)
    assert ok.format_valid and ok.answers == ("1987", CANNOT_ANSWER)
    short = parse_checker("1. Evidence: x\n[Answer: 1987]", 2)  # a question left unanswered
    assert not short.format_valid and short.answers == ("1987", None) and "1 answers for 2" in short.error
    worded = parse_checker("[Answer: a lot]", 1)
    assert not worded.format_valid and worded.answers == (None,)
    assert not parse_checker("I think it is 1987.", 1).format_valid


# --- blindness ----------------------------------------------------------------------------------


def test_checker_input_is_built_from_documents_and_questions_only():
    assert list(inspect.signature(checker_messages).parameters) == ["documents", "questions"]
    text = "\n".join(m["content"] for m in checker_messages(DOCS, ["In which year was Kavelo Works founded?"]))
    assert "Kavelo Works was founded by Dira Mot in 1987." in text and "In which year was Kavelo Works" in text


def _role(prompt: str) -> str:
    if march.SOLVER_SYSTEM.split(".")[0] in prompt:
        return "solver"
    if march.PROPOSER_SYSTEM.split(".")[0] in prompt:
        return "proposer"
    assert march.CHECKER_SYSTEM.split(";")[0] in prompt
    return "checker"


def scripted(replies: dict) -> tuple[ScriptLLM, list]:
    """A scripted policy answering each role with ``replies[role]`` (a text, or a function of the
    prompt); it records every prompt by role."""
    seen = []

    def reply(prompt: str) -> str:
        role = _role(prompt)
        seen.append((role, prompt))
        return replies[role](prompt) if callable(replies[role]) else replies[role]

    return ScriptLLM(tiny_tokenizer(), reply), seen


def test_the_checker_never_sees_the_answer_or_the_claimed_numbers():
    # the solver states a made-up number beside a marker sentence; the proposer asks about it
    llm, seen = scripted({
        "solver": "Kavelo Works was founded in 1555. ZEBRAMARK is certain.",
        "proposer": "- Question: In which year was Kavelo Works founded? [Answer: 1555]",
        "checker": "1. Evidence: Kavelo Works was founded by Dira Mot in 1987.\n[Answer: 1987]",
    })
    [episode] = run_march(llm, [ITEM], march.default_march_params(checker_samples=2))
    checker_prompts = [p for role, p in seen if role == "checker"]
    assert len(checker_prompts) == 2  # k samples, each one blind
    for prompt in checker_prompts:
        assert "ZEBRAMARK" not in prompt and "1555" not in prompt
        assert "In which year was Kavelo Works founded?" in prompt  # the proposer's question does reach it
    assert [p for role, p in seen if role == "proposer" and "ZEBRAMARK" in p]  # the proposer sees y
    assert not [p for role, p in seen if role == "proposer" and "Dira Mot" in p]  # ... and never the documents
    solver, votes = episode.claims()
    assert solver == ["1555"] and votes == [["1987", "1987"]]
    assert zero_tolerance_reward(solver, votes).score == 0.0  # the hallucinated year is caught


# --- episodes -------------------------------------------------------------------------------------


def test_an_episode_whose_numbers_all_hold_scores_and_trains_solver_and_checker():
    llm, _ = scripted({
        "solver": "Kavelo Works was founded in 1987.",
        "proposer": "- Question: In which year was Kavelo Works founded? [Answer: 1987]",
        "checker": "1. Evidence: founded by Dira Mot in 1987.\n[Answer: 1,987]",
    })
    episodes = run_march(llm, [ITEM], march.default_march_params(checker_samples=3), n=2)
    assert len(episodes) == 2 and all(ep.format_valid for ep in episodes)
    ep = episodes[0]
    assert ep.claims() == (["1987"], [["1987"] * 3])
    assert zero_tolerance_reward(*ep.claims()).score == 1.0
    assert [role for role, _ in ep.parts] == ["solver", "checker"]
    assert ep.parts[1][1] is ep.checkers[0]
    assert ep.prompt_ids == ep.solver.prompt_ids and sum(ep.loss_mask) > 0
    solver_only = run_march(llm, [ITEM], march.default_march_params(), train_roles=("solver",))[0]
    assert [role for role, _ in solver_only.parts] == ["solver"]


@pytest.mark.parametrize("replies, role", [
    ({"solver": "", "proposer": "None", "checker": "[Answer: 1]"}, "solver"),
    ({"solver": "It was 1987.", "proposer": "Here you go: 1987!", "checker": "[Answer: 1987]"}, "proposer"),
    ({"solver": "It was 1987.", "proposer": "- Question: When was Kavelo Works founded? [Answer: 1987]",
      "checker": "no idea"}, "checker"),
])
def test_malformed_output_is_a_recorded_format_failure_scored_as_a_failed_claim(replies, role):
    llm, _ = scripted(replies)
    [ep] = run_march(llm, [ITEM], march.default_march_params(checker_samples=1))
    assert role in ep.format_errors and not ep.format_valid
    assert zero_tolerance_reward(*ep.claims()).score == 0.0


def test_no_number_to_check_means_no_checker_call():
    llm, seen = scripted({"solver": "The documents do not say.", "proposer": "None", "checker": "[Answer: 1]"})
    [ep] = run_march(llm, [ITEM], march.default_march_params())
    assert ep.format_valid and ep.checkers == [] and ep.claims() == ([], [])
    assert not [r for r, _ in seen if r == "checker"]


def test_hallucination_and_accuracy_measures():
    assert march.unsupported_numbers("It was founded in 1987 with 12 lines.", DOCS) == []
    assert march.unsupported_numbers("It was founded in 1555.", DOCS) == ["1555"]
    # a number the question itself states is not an invention, nor the answer
    q = "How many product lines did Kavelo Works list in 2001?"
    assert march.unsupported_numbers("In 2001 it listed 12.", DOCS, q) == []
    assert march.answer_number("In 2001 it listed twelve.", q) == "12"
    assert march.answer_number("No idea.", q) is None


def test_judge_answer_on_answerable_and_unanswerable_questions():
    assert march.judge_answer("Kavelo Works was founded in 1987.", ITEM) == (True, False)
    # a distractor's year: wrong, but stated by a document
    assert march.judge_answer("Kavelo Works was founded in 1990.", ITEM) == (False, False)
    assert march.judge_answer("Kavelo Works was founded in 1555.", ITEM) == (False, True)
    assert march.judge_answer("The documents do not give this number.", ITEM) == (False, False)
    # the documents lack the asked number: stating one is a hallucination, even digits a document has
    missing = MarchItem("q2", "In which year was Orlen Studios founded?", DOCS, "1979", answerable=False)
    assert march.judge_answer("The documents do not give this number.", missing) == (True, False)
    assert march.judge_answer("Orlen Studios was founded in 1990.", missing) == (False, True)
    assert march.judge_answer("Orlen Studios was founded in 1979.", missing) == (False, True)


# --- the asked question as claim 0 (anchor_question) ----------------------------------------------

MISSING = MarchItem("q3", "In which year was Orlen Studios founded?", DOCS, "1979", answerable=False)


def answering_checker(prompt: str) -> str:
    """A checker that answers each listed question from ``DOCS``: Kavelo's and Sutar's years, and
    ``Cannot answer`` for anything else."""
    questions = re.findall(r"^\d+\. (.+)$", prompt.split("Questions:")[-1], re.MULTILINE)
    years = {"Kavelo": "1987", "Sutar": "1990"}
    answers = [next((y for name, y in years.items() if name in q), "Cannot answer") for q in questions]
    return "\n".join(f"{i}. Evidence: -\n[Answer: {a}]" for i, a in enumerate(answers, 1))


def scripted_with_checker(solver: str, proposer: str) -> tuple[ScriptLLM, list]:
    return scripted({"solver": solver, "proposer": proposer, "checker": answering_checker})


def ztr(item: MarchItem, solver: str, proposer: str, anchor: bool) -> float:
    llm, _ = scripted_with_checker(solver, proposer)
    [ep] = run_march(llm, [item], march.default_march_params(checker_samples=3, anchor_question=anchor))
    assert ep.format_valid
    return zero_tolerance_reward(*ep.claims()).score


def test_an_answer_about_another_entity_passes_unanchored_and_fails_anchored():
    # asked about a company no document describes, the answer states another company's true year
    solver = "Sutar Labs was founded in 1990."
    proposer = "- Question: When was Sutar Labs founded? [Answer: 1990]"
    assert ztr(MISSING, solver, proposer, anchor=False) == 1.0  # the gap the anchor closes
    assert ztr(MISSING, solver, proposer, anchor=True) == 0.0


def test_declining_is_checked_against_the_documents_when_anchored():
    decline = "The documents do not give this number."
    assert ztr(ITEM, decline, "None", anchor=False) == 1.0  # no claim, nothing to fail
    assert ztr(ITEM, decline, "None", anchor=True) == 0.0  # the documents do give 1987
    assert ztr(MISSING, decline, "None", anchor=True) == 1.0  # ... and do not give Orlen's year
    right = ("Kavelo Works was founded in 1987.",
             "- Question: In which year was Kavelo Works founded? [Answer: 1987]")
    assert ztr(ITEM, *right, anchor=True) == 1.0


def test_the_anchored_checker_sees_the_question_but_never_the_answer():
    llm, seen = scripted_with_checker("Orlen Studios was founded in 1555. ZEBRAMARK.", "None")
    [ep] = run_march(llm, [MISSING], march.default_march_params(checker_samples=2, anchor_question=True))
    checker_prompts = [p for role, p in seen if role == "checker"]
    assert len(checker_prompts) == 2
    for prompt in checker_prompts:
        assert MISSING.question in prompt and "1555" not in prompt and "ZEBRAMARK" not in prompt
    assert ep.audited == ((MISSING.question, "1555"),) and ep.proposals.pairs == ()
    assert ep.claims() == (["1555"], [[CANNOT_ANSWER, CANNOT_ANSWER]])


def test_a_proposer_pair_claiming_the_anchored_number_is_audited_once():
    pairs = (("What year was Kavelo Works founded?", "1987"), ("How many product lines does it list?", "12"))
    audit = march.audit_pairs(ITEM, "Kavelo Works was founded in 1987 and lists 12 product lines.",
                              march.ProposalParse(pairs, True, None), True)
    assert audit == ((ITEM.question, "1987"), pairs[1])
    assert march.audit_pairs(ITEM, "", march.ProposalParse(pairs, True, None), False) == pairs


def test_anchored_a_malformed_proposer_is_recorded_but_the_answer_is_still_audited():
    bad_proposer = "- Question: Who founded it? [Answer: Dira Mot]"
    llm, _ = scripted_with_checker("Kavelo Works was founded in 1987.", bad_proposer)
    [ep] = run_march(llm, [ITEM], march.default_march_params(checker_samples=3, anchor_question=True))
    assert "proposer" in ep.format_errors  # counted in the results ...
    assert zero_tolerance_reward(*ep.claims()).score == 1.0  # ... but the right number holds
    llm, _ = scripted_with_checker("Kavelo Works was founded in 1555.", bad_proposer)
    [ep] = run_march(llm, [ITEM], march.default_march_params(checker_samples=3, anchor_question=True))
    assert zero_tolerance_reward(*ep.claims()).score == 0.0


def test_an_answer_stating_no_number_is_not_sent_to_the_proposer():
    llm, seen = scripted_with_checker("The documents do not give this number.", "- Question: x? [Answer: No]")
    [ep] = run_march(llm, [MISSING], march.default_march_params(anchor_question=True))
    assert ep.proposer is None and ep.format_valid and "proposer" not in [r for r, _ in seen]
    assert ep.claims() == ([CANNOT_ANSWER], [[CANNOT_ANSWER] * 3])
