"""Secrets stay in the environment (issue 41): a sentinel key set only there is used (the server sees
it) and written nowhere: not in outputs, caches (the sqlite LLM cache, FACTRL_CACHE), checkpoints,
logs, Prefect's database, nor in stdout/stderr.

Two runs, on the real code paths that take a key:

* the teacher of ``synthesize`` (``open_teacher`` with backend ``openai`` -> ``OpenAICompatLLM``,
  ``run_teacher``'s Prefect flow with its disk cache and batch checkpoints) against a fault-injecting
  OpenAI-compatible server that records the ``Authorization`` header, so retries and their log
  lines run too;
* a ``factrl serve-retriever`` session bound beyond ``127.0.0.1`` (on 127.0.0.2: treated as
  non-loopback by the bind rule, yet unreachable from other machines), its token the sentinel,
  queried by ``RetrievalClient`` with the token from the environment, and once with a wrong one.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from pathlib import Path

import pytest

from factrl.testing.fault_llm import FaultyOpenAI
from factrl.testing.servers import running_app


def sentinel() -> str:
    return f"sk-factrl-SENTINEL-{secrets.token_hex(12)}"


def files_holding(secret: str, *roots: Path) -> list[str]:
    """Every file under ``roots`` whose bytes contain ``secret`` (plain or as UTF-16, which sqlite
    can store); also counts what was searched, so an empty search cannot pass for a clean one."""
    needles = (secret.encode(), secret.encode("utf-16-le"))
    found = []
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and any(n in path.read_bytes() for n in needles):
                found.append(str(path))
    return found


def all_files(*roots: Path) -> list[Path]:
    return [p for r in roots for p in ([r] if r.is_file() else r.rglob("*")) if p.is_file()]


def teacher_reply(body: dict, k: int) -> str:
    return "Rationale: the evidence names it.\nAnswer: Varna"


@pytest.mark.slow  # a Prefect API starts for the flow (~20-60 s on a busy 2-core machine)
def test_teacher_run_writes_the_key_nowhere(tmp_path, monkeypatch, capfd):
    from factrl import signatures
    from factrl.orchestration.teacher import run_teacher
    from factrl.recipes.teacher import open_teacher
    from factrl.recipes.teacher_params import TeacherParams
    from factrl.testing.prefect_harness import prefect_harness

    key = sentinel()
    monkeypatch.setenv("FACTRL_SENTINEL_KEY", key)
    monkeypatch.setenv("FACTRL_CACHE", str(tmp_path / "factrl-cache"))
    log_file = tmp_path / "run.log"
    handler = logging.FileHandler(log_file)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    # the first attempt of every third question fails (a 500, then a 429): retries log, errors format
    server = FaultyOpenAI(lambda content, attempt: ("server_error", None, "rate_limit")[len(content) % 3]
                          if attempt == 1 else None, reply=teacher_reply)
    items = [{"claim": f"Orlen Studios {i} is based in Varna.", "label": "SUPPORTS",
              "evidence": [f"Orlen Studios {i} is a studio in Varna."], "question": f"Where is studio {i} based?"}
             for i in range(12)]
    try:
        with prefect_harness():
            from prefect.settings import PREFECT_API_DATABASE_CONNECTION_URL

            db_url = PREFECT_API_DATABASE_CONNECTION_URL.value() or ""
            with running_app(server.app) as url:
                params = TeacherParams(backend="openai", model="fake-teacher", base_url=f"{url}/v1",
                                       api_key_env="FACTRL_SENTINEL_KEY")
                with open_teacher(params, concurrency=4) as teacher:
                    answers, usage = run_teacher(items, teacher, prompt_hash=signatures.pseudo_qa_prompt_hash(),
                                                 cache_path=tmp_path / "cache" / "teacher.sqlite",
                                                 checkpoint_dir=tmp_path / "checkpoints", batch_size=4)
            prefect_db = Path(db_url.split("///", 1)[-1]) if db_url.startswith("sqlite") else None
            out, err = capfd.readouterr()
            (tmp_path / "stdout.txt").write_text(out + err)
            assert [a.answer for a in answers] == ["Varna"] * 12
            assert server.auth == {f"Bearer {key}"}  # the key did reach the server
            assert sum(server.faults.values()) >= 4 and usage["teacher_calls"] >= 12
            roots = [tmp_path] + ([prefect_db] if prefect_db and prefect_db.exists() else [])
            searched = all_files(*roots)
            assert any(p.suffix == ".sqlite" for p in searched) and log_file in searched
            assert any("checkpoints" in p.parts for p in searched)
            assert files_holding(key, *roots) == []
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()


def test_retriever_session_writes_the_token_nowhere(tmp_path, demo_world):
    import httpx

    from factrl.retrieval.client import RetrievalClient, RetrievalError
    from factrl.servers import free_port, spawn

    token = sentinel()
    claims, index_dir = demo_world
    host, port = "127.0.0.2", free_port("127.0.0.2")
    log_path = tmp_path / "retriever.log"
    env = {"FACTRL_RETRIEVER_TOKEN": token, "FACTRL_CACHE": str(tmp_path / "factrl-cache")}
    cmd = [sys.executable, "-m", "factrl.cli", "serve-retriever", "--index", str(index_dir), "--mode", "bm25",
           "--host", host, "--port", str(port)]
    url = f"http://{host}:{port}"
    with spawn(cmd, f"{url}/health", env=env, log_path=log_path, timeout=120):
        assert httpx.post(f"{url}/retrieve", json={"queries": ["x"]}).status_code == 401
        os.environ["FACTRL_RETRIEVER_TOKEN"] = token
        try:
            with RetrievalClient(url) as client:
                hits = client.search([c["claim"] for c in claims[:4]], k=2)
        finally:
            del os.environ["FACTRL_RETRIEVER_TOKEN"]
        assert len(hits) == 4 and all(len(h) == 2 for h in hits)
        with RetrievalClient(url, retries=0) as client, pytest.raises(RetrievalError, match="401") as refused:
            client.search(["x"])
        assert token not in str(refused.value)
    assert log_path.exists() and files_holding(token, tmp_path, index_dir) == []
