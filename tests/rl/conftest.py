"""Fixtures of the rl tests: verl's core_algos (the parity reference) and a tiny Llama policy."""

from __future__ import annotations

import pytest

from tests.rl.tiny import tiny_model, tokenizer


@pytest.fixture(scope="session")
def verl_algos():
    """verl 0.9's ``core_algos`` (installed --no-deps by `make setup`)."""
    return pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl 0.9 not installed (make setup)")


@pytest.fixture(scope="session")
def tok():
    return tokenizer()


@pytest.fixture
def tiny(tok):
    return tiny_model(tok)
