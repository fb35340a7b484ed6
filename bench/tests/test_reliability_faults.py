"""bench/reliability_faults.py: each stage that calls a model over HTTP, against the fault server,
ends every record answered or failed with a reason (none lost), and a rerun of the stages that keep
a cache or work files sends nothing (issue 41)."""

from __future__ import annotations

import pytest

from bench import reliability_faults as rf


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch):
    """The bench's short client timeout (the timeout fault fires in 2 s, not 300), for this test only."""
    from factrl.llm.openai_compat import OpenAICompatLLM

    monkeypatch.setattr(OpenAICompatLLM, "__init__", rf.shortened(OpenAICompatLLM.__init__))


def assert_nothing_lost(got: dict) -> None:
    assert "error" not in got, got
    assert got["records"] > 0 and got["records_lost"] == 0, got
    assert got["answered"] + got["failed_with_reason"] == got["records"], got
    assert sum(got["faults_injected"].values()) > 0, got  # the faults really hit this stage


def test_serve_with_an_openai_checkpoint_loses_no_claim_and_pays_once(tmp_path):
    got = rf.serve_openai(tmp_path, 8)
    assert_nothing_lost(got)
    assert got["answered"] == got["records"]  # the fault server always ends with a well-formed verdict
    assert got["rerun_requests"] == 0 and got["rerun_results"] == got["records"], got  # the LLM cache answers


@pytest.mark.slow  # builds a world and its index, HARIS rollouts over HTTP
def test_warmup_teacher_loses_nothing_and_its_rerun_pays_nothing(tmp_path):
    got = rf.warmup_teacher(tmp_path, 8)
    assert_nothing_lost(got)
    assert got["rerun_requests"] == 0 and got["identical_requests_resent"] == 0, got


@pytest.mark.slow  # a Prefect API starts
def test_debate_with_openai_members_loses_nothing_and_its_rerun_pays_nothing(tmp_path):
    got = rf.debate_server_members(tmp_path, 8)
    assert_nothing_lost(got)
    assert got["rerun_requests"] == 0 and got["rerun_same"], got


@pytest.mark.slow
def test_evaluate_openai_loses_nothing_and_its_rerun_pays_nothing(tmp_path):
    got = rf.evaluate_openai(tmp_path, 8)
    assert_nothing_lost(got)
    assert got["rerun_requests"] == 0, got  # greedy calls to an endpoint go through the LLM cache
