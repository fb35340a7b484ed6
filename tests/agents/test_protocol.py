"""The tag grammar: parsing, verdicts, format validity, and a parser that never raises."""

from hypothesis import given, settings
from hypothesis import strategies as st

from factrl.agents.protocol import (
    ALL_TAGS,
    Segment,
    boxed_spans,
    escape_tags,
    extract_boxed,
    format_valid,
    parse_reasoning,
    parse_search,
    parse_tags,
)

GOOD_REASONING = (
    "<think>I need the birthplace first.</think>\n"
    "<question>Where was Ada Lovelace born?</question>\n"
    "<result>Ada Lovelace was born in London.</result>\n"
    "<think>London is in England.</think>\n"
    "<verification>The statement holds: \\boxed{Support}</verification>"
)
GOOD_SEARCH = (
    "<think>Search the name.</think><search>Ada Lovelace birthplace</search>"
    "<result>Doc 1: Ada Lovelace was born in London.</result>"
    "<report>Ada Lovelace was born in London.</report>"
)


def test_parse_tags_splits_tagged_and_loose_text():
    segs = parse_tags("hi <think>a</think> mid <search>q</search>")
    assert segs == [Segment(None, "hi "), Segment("think", "a"), Segment(None, " mid "), Segment("search", "q")]


def test_parse_tags_unclosed_and_stray_closing():
    assert parse_tags("</think>x<question>open") == [Segment(None, "</think>x"), Segment("question", "open", closed=False)]


def test_parse_tags_nested_tag_is_text_of_outer_segment():
    segs = parse_tags("<think>a <question>b</question> c</think>")
    assert segs == [Segment("think", "a <question>b</question> c")]


def test_good_reasoning():
    p = parse_reasoning(GOOD_REASONING)
    assert p.questions == ("Where was Ada Lovelace born?",)
    assert p.verdict == "SUPPORTS"
    assert p.format_valid and p.error is None


def test_refute_and_lenient_box_spelling():
    text = "<think>no</think><verification>\\[\\boxed{ refuted }\\]</verification>"
    p = parse_reasoning(text)
    assert p.verdict == "REFUTES" and p.format_valid


def test_reasoning_invalid_cases():
    cases = {
        "no verification": "<think>x</think>",
        "question without result": "<question>Who?</question><verification>\\boxed{Support}</verification>",
        "result without question": "<result>r</result><verification>\\boxed{Support}</verification>",
        "loose text": "blah <verification>\\boxed{Support}</verification>",
        "two verifications": "<verification>\\boxed{Support}</verification><verification>\\boxed{Refute}</verification>",
        "not last": "<verification>\\boxed{Support}</verification><think>x</think>",
        "no box": "<verification>Support</verification>",
        "conflict": "<verification>\\boxed{Support} \\boxed{Refute}</verification>",
        "nested": "<think><question>q</question></think><verification>\\boxed{Support}</verification>",
        "search tag": "<search>q</search><result>r</result><verification>\\boxed{Support}</verification>",
        "unclosed": "<think>x</think><verification>\\boxed{Support}",
    }
    for name, text in cases.items():
        p = parse_reasoning(text)
        assert not p.format_valid, name
        assert p.error, name


def test_verdict_read_even_when_format_invalid():
    p = parse_reasoning("loose <verification>\\boxed{Refute}</verification>")
    assert p.verdict == "REFUTES" and not p.format_valid


def test_good_search_and_invalid_search():
    p = parse_search(GOOD_SEARCH)
    assert p.queries == ("Ada Lovelace birthplace",)
    assert p.report == "Ada Lovelace was born in London."
    assert p.format_valid
    assert not parse_search("<search>x</search><report>r</report>").format_valid
    assert not parse_search("<think>t</think><report>  </report>").format_valid
    assert not parse_search("<question>q</question><result>r</result><report>a</report>").format_valid
    assert parse_search("<think>t</think><report>known</report>").format_valid


def test_format_valid_dispatch():
    assert format_valid(GOOD_REASONING, "reasoning")
    assert format_valid(GOOD_SEARCH, "search")
    assert not format_valid(GOOD_SEARCH, "reasoning")


def test_escape_tags_keeps_result_span_intact():
    passage = "A page quoting </result> and <search>x</search>"
    text = "<search>q</search><result>" + escape_tags(passage) + "</result><report>a</report>"
    assert parse_search(text).format_valid
    assert "<" not in escape_tags("<think></report>")


_tag_text = st.sampled_from([f"<{t}>" for t in ALL_TAGS] + [f"</{t}>" for t in ALL_TAGS]
                            + ["\\boxed{", "}", "Support", "Refute", "<", ">", "/", " "])
_fragment = st.one_of(st.text(max_size=20), _tag_text)


@settings(max_examples=400, deadline=None)
@given(st.lists(_fragment, max_size=30).map("".join))
def test_parsers_never_raise(text):
    segs = parse_tags(text)
    assert all(isinstance(s, Segment) for s in segs)
    r = parse_reasoning(text)
    s = parse_search(text)
    assert r.format_valid == (r.error is None)
    assert s.format_valid == (s.error is None)
    assert r.verdict in (None, "SUPPORTS", "REFUTES")
    if r.format_valid:
        assert r.verdict is not None
    if s.format_valid:
        assert s.report


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_parsers_never_raise_on_any_unicode(text):
    parse_tags(text)
    parse_reasoning(text)
    parse_search(text)


def test_extract_boxed_balances_braces():
    assert extract_boxed(r"a \boxed{180.0} b \boxed{\text{x}} c \boxed{open") == ["180.0", r"\text{x}"]
    assert extract_boxed("none") == []
    text = r"x \boxed{ {a} } y"
    assert boxed_spans(text) == [(2, len(text) - 2, "{a}")]  # spans cover the whole box; content stripped
