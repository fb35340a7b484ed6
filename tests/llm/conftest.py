"""Shared fixtures: real servers on loopback, SmolLM2's tokenizer alone (SmolLM2's engine, ``local_llm``:
tests/conftest.py)."""

import contextlib

import pytest

from factrl.testing.servers import running_app


@pytest.fixture
def serve_app():
    """Start ASGI apps with uvicorn on free 127.0.0.1 ports in background threads; yields a
    function ``app -> base_url``; every server is stopped at teardown."""
    with contextlib.ExitStack() as stack:
        yield lambda app: stack.enter_context(running_app(app)) + "/v1"


@pytest.fixture(scope="session")
def tok():
    """SmolLM2's tokenizer without an engine (tests that decode nothing, or decode with a tiny model)."""
    from tests.rl.tiny import tokenizer

    return tokenizer()
