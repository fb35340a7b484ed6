"""Fixtures of the rl tests: verl's core_algos (the parity reference) and a tiny Llama policy."""

from __future__ import annotations

import pytest

from tests.rl.tiny import tiny_model, tokenizer


@pytest.fixture(scope="session")
def verl_algos():
    """verl 0.9's ``core_algos`` (installed --no-deps by `make setup`): a missing verl fails the
    parity tests rather than skipping them, since the set-up always installs it."""
    from verl.trainer.ppo import core_algos

    return core_algos


@pytest.fixture(scope="session")
def tok():
    return tokenizer()


@pytest.fixture
def tiny(tok):
    return tiny_model(tok)
