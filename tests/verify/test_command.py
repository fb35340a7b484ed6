"""`factrl verify` (factrl.verify.command): the trace, then the outcome: NOT ENOUGH INFO with the failed
rules and what was searched when the run's citations do not bear on the claim."""

from __future__ import annotations

import pytest

from factrl.verify.command import main


def test_cli_verify_says_not_enough_evidence_for_a_claim_the_corpus_does_not_hold(demo_world, script_llm,
                                                                                   monkeypatch, capsys, tmp_path):
    """A model that asks about Paris, reads demo passages about other entities and still writes Support:
    `factrl verify` prints NOT ENOUGH INFO with the failed rules and what was searched."""
    from factrl.llm import backends

    def reply(prompt: str) -> str:
        if "You collect the information" in prompt:
            tail = prompt.rsplit("Question: ", 1)[-1]
            if "<result>" in tail:
                return "x</think><report>" + tail.split("Doc 1 ", 1)[-1].split("\n")[0] + "</report>"
            return "x</think><search>capital of France Paris</search>"
        if "<result>" in prompt.rsplit("Claim: ", 1)[-1]:
            return "ok</think><verification>\\boxed{Support}</verification>"
        return "need it</think><question>What is the capital of France?</question>"

    monkeypatch.setattr(backends, "load_llm", lambda spec: script_llm(reply))
    _, index = demo_world
    assert main(["Paris is the capital of France.", "--index", str(index), "--mode", "bm25", "--max-turns", "2",
                 "--params", str(tmp_path / "absent.yaml")]) == 0
    out = capsys.readouterr().out
    assert "VERDICT: SUPPORTS" in out and "OUTCOME: NOT ENOUGH INFO" in out
    assert "0 of 1 questions answered from retrieved text" in out and "searched: capital of France Paris" in out


@pytest.mark.slow
def test_factrl_verify_with_smollm2_on_a_claim_outside_the_demo_corpus(demo_world, capsys, tmp_path):
    """The real SmolLM2-135M path (both agents, greedy) over a demo world's index: whatever the base
    model writes, "Paris is the capital of France." gets no verdict the demo passages back."""
    _, index = demo_world
    assert main(["Paris is the capital of France.", "--index", str(index), "--mode", "bm25", "--max-turns", "2",
                 "--max-new-tokens", "48", "--params", str(tmp_path / "absent.yaml")]) == 0
    out = capsys.readouterr().out
    assert "OUTCOME: SUPPORTS" not in out and "OUTCOME: REFUTES" not in out, out


@pytest.mark.slow
def test_cli_verify_prints_trace(demo_world, capsys):
    _, index = demo_world
    claim = demo_world[0][0]["claim"]
    assert main([claim, "--index", str(index), "--mode", "bm25", "--max-turns", "1", "--max-new-tokens", "24",
                 "--show-raw"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"CLAIM: {claim}") and "VERDICT:" in out and "finish:" in out and "OUTCOME:" in out
    assert "--- reasoning agent ---" in out


def test_cli_verify_rejects_missing_index(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["x", "--index", str(tmp_path)])
    assert "holds no finished index" in capsys.readouterr().err


def test_cli_verify_sends_each_agent_where_its_spec_says(demo_world, script_llm, monkeypatch, capsys):
    """--backend openai routes both agents to the endpoint; an explicit spec keeps its own endpoint."""
    from factrl.llm import backends

    loaded = []
    reply = "I know.</think><verification>\\boxed{Support}</verification>"
    monkeypatch.setattr(backends, "load_llm", lambda spec: loaded.append(spec) or script_llm(lambda prompt: reply))
    _, index = demo_world
    args = ["A claim.", "--index", str(index), "--mode", "bm25", "--max-turns", "1"]
    assert main([*args, "--backend", "openai", "--base-url", "http://h:1/v1", "--model", "served",
                 "--search-model", "openai:other@http://h:2/v1"]) == 0
    assert loaded == ["openai:served@http://h:1/v1", "openai:other@http://h:2/v1"]
    assert "VERDICT: SUPPORTS" in capsys.readouterr().out
