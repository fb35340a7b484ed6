"""Shared fixtures: the SmolLM2 tokenizer, a scripted LLM (SmolLM2 and the demo world: tests/conftest.py)."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # tests never touch the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest

from tests.script_llm import ScriptLLM


@pytest.fixture(scope="session")
def tokenizer(local_llm):
    return local_llm.tokenizer


@pytest.fixture
def script_llm(tokenizer):
    return lambda reply, chat_only=False: ScriptLLM(tokenizer, reply, chat_only)
