"""The SmolLM2 tokenizer and a scripted LLM for the service's engine tests (as tests/agents' fixtures)."""

from __future__ import annotations

import pytest

from tests.script_llm import ScriptLLM


@pytest.fixture(scope="session")
def tokenizer(local_llm):
    return local_llm.tokenizer


@pytest.fixture
def script_llm(tokenizer):
    return lambda reply, chat_only=False: ScriptLLM(tokenizer, reply, chat_only)
