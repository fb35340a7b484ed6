"""prefect's test harness with the one startup limit every temporary Prefect API server gets.

``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` (180 s: the Makefile exports it, tests/conftest.py
sets it unless the environment does) bounds the ephemeral server a flow starts for itself; the
harness has its own limit, 30 s unless told, which a busy 2-core machine overran (issue 39).
``server_startup_timeout=None`` makes the harness read the same setting.
"""

from __future__ import annotations


def prefect_harness():
    """``prefect_test_harness()`` bounded by PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS."""
    from prefect.testing.utilities import prefect_test_harness

    return prefect_test_harness(server_startup_timeout=None)
