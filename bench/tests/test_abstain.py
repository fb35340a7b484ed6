"""bench/abstain.py end to end on the demo world with a scripted HARIS pair (no model): an agent that asks
about the claim's subject and reports the first passage found answers in-corpus claims and is turned to
NOT ENOUGH INFO on out-of-corpus ones; the result carries exactly the issue's keys."""

from __future__ import annotations

import json

from bench import abstain
from factrl.agents.abstain import named_entities
from factrl.agents.haris import REASONING_SYSTEM, SEARCH_SYSTEM
from factrl.llm.base import Completion, TokensUnsupported


class SubjectAsker:
    """Chat-only HARIS agents: the reasoning agent asks about the claim's subject, then says Support;
    the search agent searches the question and reports Doc 1's text verbatim."""

    model_name = "subject-asker"

    def complete_tokens(self, prompts, params):
        raise TokensUnsupported("chat only")

    @staticmethod
    def _reply(conv) -> str:
        system, user = conv[0]["content"], conv[1]["content"]
        later = [m["content"] for m in conv[2:] if m["role"] != "assistant"]
        if system == REASONING_SYSTEM:
            if not later:
                subject = (named_entities(user.removeprefix("Claim: ")) or ["it"])[0]
                return f"<think>Look it up.</think><question>What is {subject}?</question>"
            return "<think>Found.</think><verification>\\boxed{Support}</verification>"
        if system == SEARCH_SYSTEM:
            if not later:
                return f"<think>Search.</think><search>{user.removeprefix('Question: ')}</search>"
            first = later[-1].split("Doc 1 ", 1)[-1].split("\n")[0]
            return f"<report>{first.split(') ', 1)[-1]}</report>"
        raise AssertionError(f"unexpected prompt: {system[:60]}")

    def chat(self, conversations, params):
        return [[Completion(text=self._reply(c), finish_reason="stop")] for c in conversations]


def test_the_bench_separates_in_corpus_from_out_of_corpus_claims(tmp_path):
    abstain.build_demo_workspace(tmp_path / "ws")
    out = tmp_path / "abstain.json"
    args = abstain.parser().parse_args(["--workspace", str(tmp_path / "ws"), "--checkpoint", "base", "--per-hop", "3",
                                        "--dev-per-hop", "2", "--out-of-corpus", "8", "--mode", "bm25",
                                        "--max-turns", "2", "--smoke", "--out", str(out)])
    result = abstain.run(args, llm_loader=lambda spec: SubjectAsker())
    assert set(result["in_corpus"]) >= {"coverage", "accuracy_answered", "accuracy_all"}
    assert set(result["out_of_corpus"]) >= {"nei_rate", "n"} and set(result["ece"]) >= {"before", "after"}
    assert result["out_of_corpus"]["n"] >= 6 and result["out_of_corpus"]["nei_rate"] == 1.0
    assert result["in_corpus"]["coverage"] >= 0.8  # the subject's own passage answers its question
    assert result["rules"]["decided_out_of_corpus"]  # which rules turned them
    assert result["risk_coverage"] and all(0 <= p["risk"] <= 1 for p in result["risk_coverage"])
    json.dumps(result)


def test_a_rerun_skips_the_runs_already_kept(tmp_path):
    """Every run is kept as it finishes: a rerun with the same arguments runs no model (its loader's
    agent would fail any call) and gives the same figures; other arguments run again."""
    abstain.build_demo_workspace(tmp_path / "ws")
    argv = ["--workspace", str(tmp_path / "ws"), "--checkpoint", "base", "--per-hop", "2", "--dev-per-hop", "2",
            "--out-of-corpus", "4", "--mode", "bm25", "--max-turns", "2", "--smoke", "--out", str(tmp_path / "a.json")]
    first = abstain.run(abstain.parser().parse_args(argv), llm_loader=lambda spec: SubjectAsker())

    class Refuses(SubjectAsker):
        def chat(self, conversations, params):
            raise AssertionError("a kept run ran again")

    again = abstain.run(abstain.parser().parse_args(argv), llm_loader=lambda spec: Refuses())
    assert again == first
    # another map or rule choice only reads the kept rows
    remapped = abstain.run(abstain.parser().parse_args([*argv, "--method", "temperature", "--min-coverage", "0.5"]),
                           llm_loader=lambda spec: Refuses())
    assert remapped["ece"]["method"] == {"before": "temperature", "after": "temperature"}
    kept = sorted(p.name for p in (tmp_path / "ws" / ".bench-abstain").rglob("*.pkl"))
    assert kept == ["dev_in_corpus-2.pkl", "dev_out_of_corpus-4.pkl", "test_in_corpus-2.pkl", "test_out_of_corpus-4.pkl"]
    other = abstain.parser().parse_args([*argv[:-2], "--seed", "1"])
    try:
        abstain.run(other, llm_loader=lambda spec: Refuses())
    except AssertionError as err:
        assert "ran again" in str(err)
    else:
        raise AssertionError("other arguments reused kept runs")
