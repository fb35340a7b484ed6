"""Fixtures of the rl tests: verl's core_algos (the parity reference) and a tiny Llama policy."""

from __future__ import annotations

import importlib

import pytest

from tests.rl.tiny import tiny_model, tokenizer


@pytest.fixture(scope="session")
def verl_algos():
    """verl 0.9's ``core_algos`` (installed --no-deps by `make setup`). Missing verl fails the parity
    tests instead of skipping them: `make setup` installs it, so its absence is a broken setup."""
    try:
        return importlib.import_module("verl.trainer.ppo.core_algos")
    except ImportError as err:
        pytest.fail(f"verl 0.9 is not importable ({err}); the parity tests need it: run `make setup`",
                    pytrace=False)


@pytest.fixture(scope="session")
def tok():
    return tokenizer()


@pytest.fixture
def tiny(tok):
    return tiny_model(tok)
