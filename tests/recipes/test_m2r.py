"""The M2R recipe's evaluation (factrl.recipes.m2r): the naive RAG baseline's answer extraction and
its scoring through the shared agent loop, on SmolLM2's real tokenizer with a scripted model."""

from __future__ import annotations

import pytest

from factrl.agents.m2r import MacroTool
from factrl.recipes import m2r as recipe
from tests.agents.test_m2r import FakeRetriever
from tests.script_llm import ScriptLLM


@pytest.mark.parametrize(("reply", "answer"), [
    ("The founder is \\boxed{Ilse Parrow}.", "Ilse Parrow"),
    ("\\boxed{Varna} no, \\boxed{Tessik}", "Tessik"),                      # the last box wins
    ("Ilse Parrow founded it. She was born in Tessik.", "Ilse Parrow founded it"),
    ("\n\nAnswer: Ilse Parrow\nbecause [P1] says so", "Ilse Parrow"),
    ("The answer is: 1892.", "1892"),
    ("The answer to this question is: Zozo Butan", "Zozo Butan"),
    ("The answer is Zozo Butan.", "Zozo Butan"),
    # the answer comes last
    ("The founder of the developer of Medath: Arena was born in the city of Tessik.",
     "The founder of the developer of Medath: Arena was born in the city of Tessik"),
    ("<think>short</think>\nIlse Parrow", "short"),                        # the first line, think or not
    (" ".join(["word"] * 31), None),
    ("", None),
    ("   \n  ", None),
])
def test_rag_prediction_prefers_the_box_and_falls_back_to_the_first_sentence(reply, answer):
    got = recipe.rag_prediction(reply)
    if answer is None and reply.strip():
        assert got == " ".join(["word"] * 30)
    else:
        assert got == answer


def test_naive_rag_is_scored_on_an_unboxed_reply(tokenizer):
    """A model that answers in plain words gets credit for them (boxed-only scoring gave 0)."""
    items = [{"question": "Who founded Orlen Studios?", "answers": ["Ilse Parrow"]},
             {"question": "Where was Ilse Parrow born?", "answers": ["the city of Tessik"]}]

    def reply(prompt: str) -> str:
        return "Ilse Parrow." if "Question: Who founded" in prompt else "She was born in Varna, a city."

    llm = ScriptLLM(tokenizer, reply)
    scores = recipe.evaluate_qa("rag", llm, items, MacroTool(FakeRetriever(), k=1))
    assert scores["em"] == 0.5 and scores["n"] == 2
    assert 0.5 < scores["f1"] < 1.0  # the second reply shares only "city" with the gold answer
