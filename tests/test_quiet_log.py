"""`make demo`'s log says only what a user can act on: faiss's loader does not list the SIMD builds it
tried, and a stage that starts Prefect's temporary server does not let it send telemetry (offline,
its failure was logged as an ERROR)."""

from __future__ import annotations

import os
import subprocess
import sys

FAISS = ("import logging; logging.basicConfig(level=logging.INFO);"
         "from factrl.retrieval.index import import_faiss; import_faiss()")


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_faiss_loads_without_its_loader_lines():
    quiet = _run(FAISS, dict(os.environ))
    assert quiet.returncode == 0, quiet.stderr
    assert "faiss" not in (quiet.stdout + quiet.stderr).lower()
    # the same import without factrl's setting does print them: the test can fail
    loud = _run("import logging; logging.basicConfig(level=logging.INFO); import faiss", dict(os.environ))
    assert "Loading faiss" in loud.stderr


def test_orchestration_turns_prefect_telemetry_off_unless_the_user_set_it():
    code = "import os, factrl.orchestration; print(os.environ['PREFECT_SERVER_ANALYTICS_ENABLED'])"
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_SERVER_ANALYTICS_ENABLED", "DO_NOT_TRACK")}
    assert _run(code, env).stdout.strip() == "false"
    assert _run(code, env | {"PREFECT_SERVER_ANALYTICS_ENABLED": "true"}).stdout.strip() == "true"
