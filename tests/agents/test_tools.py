"""Tools: top-3 retrieval behind </search>, the search agent behind </question>."""

from types import SimpleNamespace

from factrl.agents.protocol import parse_search
from factrl.agents.tools import NO_QUERY, RetrieverTool, SearchAgentTool, Tool, format_hits, open_tag
from factrl.retrieval.index import Hit


def test_retriever_tool_top3_on_demo_world(demo_world, demo_retriever):
    claims, _ = demo_world
    tool = RetrieverTool(demo_retriever, k=3)
    assert isinstance(tool, Tool) and tool.stop_tag == "</search>" and open_tag(tool.stop_tag) == "<search>"
    hop = claims[0]["hops"][0] if claims[0].get("hops") else None
    question = hop["question"] if hop else claims[0]["claim"]
    [answer, empty] = tool([question, "  "])
    assert answer.count("Doc ") == 3 and answer.startswith("Doc 1 (")
    assert empty == NO_QUERY
    assert tool.calls == 1  # one batched call; the empty query never reaches the retriever


def test_format_hits_escapes_tags():
    text = format_hits([Hit("a", "T", "has </result> inside", 1.0)])
    assert "</result>" not in text and text.startswith("Doc 1 (T)")
    # the escaped passage keeps a result span intact
    assert parse_search(f"<search>q</search><result>{text}</result><report>r</report>").format_valid


def test_search_agent_tool_returns_reports_and_keeps_history():
    def search_loop(question, stream):
        yield from ()  # a search agent that needs no model turn
        return SimpleNamespace(report=f"report on {question}" if "good" in question else None,
                               retrieved=["Doc 1 (X) fact"])
    tool = SearchAgentTool(search_loop)
    assert tool.stop_tag == "</question>"
    out = tool(["good question?", "bad question?", ""])
    assert out == ["report on good question?", "Doc 1 (X) fact", NO_QUERY]
    assert [q for q, _ in tool.history] == ["good question?", "bad question?"]
