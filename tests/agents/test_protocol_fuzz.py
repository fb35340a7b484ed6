"""Bad input, property-based: the tag protocols of every agent (HARIS reasoning, search and single
agent, M2R's two stages, MARCH's proposer and checker, SC-MAKS debate turns) and the teacher's
signatures parse any text, tag soup included, without raising (the signatures: only their
ParseError) and within a time bound that rules out catastrophic regex backtracking."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factrl import signatures
from factrl.agents import debate, m2r, march, protocol
from factrl.agents.baselines import parse_subclaims
from tests.fuzz import tried

TAGS = sorted(set(protocol.ALL_TAGS) | {"macro_tool_call", "key_info_save", "answer", "micro_tool_call",
                                         "information", "verification"})
FRAGMENTS = [f"<{t}>" for t in TAGS] + [f"</{t}>" for t in TAGS] + [
    "\\boxed{Support}", "\\boxed{Refute}", "\\boxed{", "}", "\\text{", "Answer:", "Question:", "[Answer: 3]",
    "[Answer: Cannot answer]", "Verdict: Support", "Rationale:", "Useful: yes", "None", "1,234.5", "\n", " ",
    "key: value", "<", ">", "</", "**", "- ", "1. ", "ü", "\x00", "\ud7ff",
]
texts = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=60).map("".join),
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HUGE = ["<think>" * 20_000, "\\boxed{" * 20_000, "Question: " * 20_000 + "[Answer: 1", "[Answer: " * 20_000,
        "<key_info_save>" + "a: b\n" * 20_000, "x" * 500_000, "<" * 100_000]

# parser name -> a call that must not raise
NEVER_RAISE = {
    "haris.reasoning": protocol.parse_reasoning,
    "haris.single_agent": protocol.parse_single_agent,
    "haris.search": protocol.parse_search,
    "m2r.stage1": lambda t: m2r.parse_m2r(t, stage=1),
    "m2r.stage2": lambda t: m2r.parse_m2r(t, stage=2),
    "march.proposals": march.parse_proposals,
    "march.checker": lambda t: march.parse_checker(t, 3),
    "debate.plain_text": lambda t: debate.plain_text(t, 200),
    "baselines.subclaims": parse_subclaims,
}
# the teacher's signatures: a ParseError (a re-ask) is their answer to a reply they cannot read
MAY_RAISE_PARSE_ERROR = {
    "signatures.pseudo_answer": signatures.parse_pseudo_answer,
    "signatures.verdict": signatures.parse_verdict,
    "signatures.useful": signatures.parse_useful,
}


@FUZZ
@given(text=texts)
def test_agent_parsers_never_raise(text):
    for name, parse in NEVER_RAISE.items():
        tried(f"protocol.{name}")
        result = parse(text)
        assert result is not None
        if hasattr(result, "format_valid"):
            assert isinstance(result.format_valid, bool)
            assert result.format_valid or result.error, (name, text)  # an invalid parse says why


@FUZZ
@given(text=texts)
def test_teacher_signatures_raise_only_parse_errors(text):
    for name, parse in MAY_RAISE_PARSE_ERROR.items():
        tried(name)
        try:
            parse(text)
        except signatures.ParseError as err:
            assert str(err)


def test_huge_and_pathological_texts_parse_quickly():
    for text in HUGE:
        for name, parse in {**NEVER_RAISE, **MAY_RAISE_PARSE_ERROR}.items():
            t0 = time.perf_counter()
            try:
                parse(text)
            except signatures.ParseError:
                pass
            assert time.perf_counter() - t0 < 5, f"{name} took {time.perf_counter() - t0:.1f}s on {text[:30]!r}..."


def test_non_text_and_unknown_stage_do_not_raise():
    assert not m2r.parse_m2r("<answer>x</answer>", stage=7).format_valid
    for parse in (protocol.parse_reasoning, protocol.parse_search, march.parse_proposals):
        assert not parse(None).format_valid
