"""The pytest fixtures and settings that tests/ and bench/tests/ share, defined once: each suite's
conftest.py imports them (pytest finds a fixture by its name in the conftest's namespace).

Importing this module sets the offline, telemetry-free defaults that every test run needs (no hub
download, no analytics) before anything reads them, as ``make`` does for ``make demo``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

OFFLINE_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "DVC_NO_ANALYTICS": "1",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "TOKENIZERS_PARALLELISM": "false",
    # stages that fan out with Prefect start a temporary API server; 20 s is too short on 2 busy cores
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
}
for key, value in OFFLINE_DEFAULTS.items():
    os.environ.setdefault(key, value)

# DVC stage commands run `python`: the interpreter running the tests.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

REPO_ROOT = Path(__file__).resolve().parents[3]  # src/factrl/testing/fixtures.py: a checkout, as tests run
os.environ.setdefault("FACTRL_CACHE", str(REPO_ROOT / ".cache" / "factrl"))
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """../shared/data, or skip with a clear message where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared claim data not found at {SHARED_DATA} (clone with ../shared beside the repo)")
    return SHARED_DATA


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
