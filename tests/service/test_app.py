"""factrl serve's HTTP API over a fake verifier: jobs, batching, limits, bad input, the token, corrections."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from factrl.data.sources import read_claims
from factrl.service.app import ServeError, bearer_token, main
from factrl.testing.servers import running_app
from factrl.testing.service_fakes import (
    PASSAGE,
    FakeVerifier,
    FixedCalibration,
    app_of,
    make_service,
    wait_done,
)
from tests.conftest import CHROMIUM, CHROMIUM_FLAGS, NO_CHROMIUM


@pytest.fixture
def service(tmp_path):
    svc = make_service(tmp_path)
    yield svc
    svc.worker.stop()


@pytest.fixture
def client(service):
    return TestClient(app_of(service))


def test_claim_job_lifecycle(client):
    answer = client.post("/v1/verify", json={"claim": "This is true."})
    assert answer.status_code == 200, answer.text
    job = wait_done(client, answer.json()["job_id"])
    assert (job["done"], job["total"], job["failed"]) == (1, 1, 0)
    [result] = job["results"]
    assert result["verdict"] == "SUPPORTS" and result["status"] == "done" and result["claim"] == "This is true."
    # no calibration: the confidence is the raw score, and the result says so
    assert result["confidence"] == result["raw_confidence"] == 0.75 and result["calibrated"] is False
    assert result["usage"]["model_calls"] == 2 and result["cost_usd"] == 0.0 and result["latency_s"] >= 0


def test_text_is_split_into_claims_with_offsets_and_results_stream_as_jsonl(client):
    # the decomposer (factrl.verify.decompose, sentences) keeps the two check-worthy sentences and
    # drops the question and the opinion
    text = "The film Orsa was a true story, released in 1994. Ilse Maro was born in Varna.  Is Tessik a city? I think it is lovely."
    answer = client.post("/v1/verify", json={"text": text}).json()
    assert answer["total"] == 2
    for claim in answer["claims"]:
        assert text[claim["start"]:claim["end"]] == claim["claim"]
    lines = client.get(f"/v1/jobs/{answer['job_id']}/results.jsonl").text.splitlines()
    results = sorted((json.loads(line) for line in lines), key=lambda r: r["index"])
    assert [r["claim"] for r in results] == [c["claim"] for c in answer["claims"]]
    assert [r["verdict"] for r in results] == ["SUPPORTS", "REFUTES"]
    assert all(text[r["start"]:r["end"]] == r["claim"] for r in results)


class _DecomposerLLM:
    """An endpoint stand-in for the llm decomposer: answers every chat with ``reply``."""

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def chat(self, conversations, params):
        from types import SimpleNamespace

        return [[SimpleNamespace(text=self.reply)] for _ in conversations]


def test_the_llm_decomposer_asks_the_endpoint_of_serve_decomposer_model(tmp_path, monkeypatch):
    from factrl.verify import decompose as decompose_module

    spec = "openai:decomposer@http://127.0.0.1:9/v1"
    reply = '{"claims": [{"claim": "Ilse Maro was born in Varna.", "sentence": 2}]}'
    monkeypatch.setitem(decompose_module._LLMS, spec, _DecomposerLLM(reply))
    svc = make_service(tmp_path, decomposer="llm", decomposer_model=spec)
    try:
        client = TestClient(app_of(svc))
        text = "Orsa is lovely. Ilse Maro was born in Varna."
        answer = client.post("/v1/verify", json={"text": text})
        assert answer.status_code == 200, answer.text
        [claim] = answer.json()["claims"]
        assert claim["claim"] == "Ilse Maro was born in Varna." and text[claim["start"]:claim["end"]] == claim["claim"]
        monkeypatch.setitem(decompose_module._LLMS, spec, _DecomposerLLM("I cannot do that."))
        bad = client.post("/v1/verify", json={"text": text})
        assert bad.status_code == 502 and "llm decomposer failed" in bad.json()["detail"], bad.text
    finally:
        svc.worker.stop()


def test_a_failing_claim_is_marked_failed_and_the_others_keep_their_verdicts(tmp_path):
    fake = FakeVerifier()
    svc = make_service(tmp_path, {"demo": fake}, batch_size=8, max_wait_ms=300)
    try:
        client = TestClient(app_of(svc))
        body = "\n".join(json.dumps({"id": f"c{i}", "claim": c}) for i, c in enumerate(["a true one", "boom", "false"]))
        job = wait_done(client, client.post("/v1/verify/batch", content=body).json()["job_id"])
    finally:
        svc.worker.stop()
    by_id = {r["id"]: r for r in job["results"]}
    assert job["failed"] == 1 and by_id["c1"]["status"] == "failed" and "model call failed" in by_id["c1"]["error"]
    assert by_id["c0"]["verdict"] == "SUPPORTS" and by_id["c2"]["verdict"] == "REFUTES"
    assert fake.calls[0] == ["a true one", "boom", "false"]  # one batch first, then claim by claim


def test_calibration_maps_the_raw_score(tmp_path):
    svc = make_service(tmp_path, calibrations={"demo": FixedCalibration()})
    try:
        client = TestClient(app_of(svc))
        [result] = wait_done(client, client.post("/v1/verify", json={"claim": "x"}).json()["job_id"])["results"]
    finally:
        svc.worker.stop()
    assert result["raw_confidence"] == 0.75 and result["confidence"] == 0.375 and result["calibrated"] is True


def test_concurrent_requests_run_as_one_batched_call(tmp_path):
    """Ten clients at once over real HTTP (uvicorn on 127.0.0.1): one verifier call of ten claims."""
    fake = FakeVerifier()
    svc = make_service(tmp_path, {"demo": fake}, batch_size=10, max_wait_ms=5000)
    try:
        with running_app(app_of(svc)) as url:
            ids, barrier = [], threading.Barrier(10)

            def ask(i: int) -> None:
                barrier.wait()
                ids.append(httpx.post(f"{url}/v1/verify", json={"claim": f"claim {i} is true"}, timeout=30).json()["job_id"])

            threads = [threading.Thread(target=ask, args=(i,)) for i in range(10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            with httpx.Client(base_url=url, timeout=30) as client:
                jobs = [wait_done(client, job_id) for job_id in ids]
    finally:
        svc.worker.stop()
    assert len(fake.calls) == 1 and sorted(fake.calls[0]) == sorted(f"claim {i} is true" for i in range(10))
    assert all(job["results"][0]["batch_size"] == 10 for job in jobs)
    assert svc.worker.stats.batches == 1 and svc.worker.stats.recent[0][:2] == ("demo", 10)


def test_clients_that_hang_up_leave_no_traceback_and_the_next_requests_batch(tmp_path):
    """Over real HTTP (uvicorn): 8 clients hang up mid-body, 8 after a whole request, 8 on an open
    results.jsonl stream; the server logs no traceback (a hang-up mid-body raised ClientDisconnect
    out of the endpoint: "Exception in ASGI application" per client), every started job finishes,
    the next 10 requests run as one batch, and the server stays healthy."""
    import socket
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlparse

    class Records(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    fake = FakeVerifier()
    svc = make_service(tmp_path, {"demo": fake}, batch_size=10, max_wait_ms=1000)
    server_log = Records()  # uvicorn's error log does not propagate to the root logger (caplog)
    try:
        with running_app(app_of(svc)) as url:
            logging.getLogger("uvicorn.error").addHandler(server_log)
            host, port = urlparse(url).hostname, urlparse(url).port
            body = json.dumps({"claim": "gone is true"}).encode()
            head = (f"POST /v1/verify HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode()
            for i in range(16):
                with socket.create_connection((host, port), timeout=10) as s:
                    s.sendall(head + (body[: len(body) // 2] if i < 8 else body))
            for i in range(8):
                job = httpx.post(f"{url}/v1/verify", json={"claim": f"stream {i} is true"}, timeout=30).json()
                with socket.create_connection((host, port), timeout=10) as s:
                    s.sendall(f"GET /v1/jobs/{job['job_id']}/results.jsonl HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            with httpx.Client(base_url=url, timeout=30) as client:
                for job_id in list(svc.store.jobs):
                    wait_done(client, job_id)
                fake.calls.clear()
                with ThreadPoolExecutor(10) as pool:
                    ids = list(pool.map(lambda i: client.post("/v1/verify", json={"claim": f"next {i} is true"})
                                        .json()["job_id"], range(10)))
                jobs = [wait_done(client, job_id) for job_id in ids]
                health = client.get("/healthz").json()
    finally:
        logging.getLogger("uvicorn.error").removeHandler(server_log)
        svc.worker.stop()
    # the streams' and the wave's jobs, and those of the whole requests uvicorn read before the hang-up
    # (one it sees closed first never reaches the app); half bodies made none
    assert 8 + 10 <= len(svc.store.jobs) <= 8 + 8 + 10
    assert all(job["results"][0]["verdict"] == "SUPPORTS" for job in jobs)
    assert len(fake.calls) == 1 and len(fake.calls[0]) == 10, fake.calls  # the next wave: one batch
    assert health["status"] == "ok" and health["queued"] == 0
    tracebacks = [r for r in server_log.records if r.exc_info or "Exception in ASGI" in r.getMessage()]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


@pytest.mark.parametrize("body, line, field", [
    ('{"id": "a", "claim": "ok"}\n{"id": "b"}\n', 2, "claim"),
    ('{"id": "a", "claim": "ok"}\n\n{"id": "c", "claim": 5}\n', 3, "claim"),
    ('{"id": "a", "claim": "ok"}\n{"id": "a", "claim": "again"}\n', 2, "id"),
    ('{"id": [1], "claim": "ok"}\n', 1, "id"),
    ('{"id": "a", "claim": "   "}\n', 1, "claim"),
])
def test_a_bad_batch_line_is_a_422_naming_line_and_field(client, body, line, field):
    answer = client.post("/v1/verify/batch", content=body)
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith(f"line {line}: field '{field}'"), answer.json()


def test_malformed_batch_json_names_the_line(client):
    answer = client.post("/v1/verify/batch", content='{"id": "a", "claim": "ok"}\n{"id": \n')
    assert answer.status_code == 422 and answer.json()["detail"].startswith("line 2: malformed JSON")


def test_bad_and_oversized_input(tmp_path):
    svc = make_service(tmp_path, max_claim_chars=20, max_text_chars=100, max_body_bytes=400, max_claims_per_job=3)
    try:
        client = TestClient(app_of(svc))
        cases = [
            ({"claim": "x" * 21}, 413, "serve.max_claim_chars"),
            ({"text": "A b. " * 21}, 413, "serve.max_text_chars"),
            ({"text": "Ada Lo was born. Bo Li was born. Cy Ma was born. Di Na was born."}, 413,
             "serve.max_claims_per_job"),
            ({"claim": "  "}, 422, "empty claim"),
            ({"text": ""}, 422, "empty text"),
            ({"claim": "a", "text": "b"}, 422, "exactly one"),
            ({}, 422, "exactly one"),
            ({"claim": "a", "checkpoint": "nope"}, 422, "unknown checkpoint 'nope'"),
            ({"claim": "a", "colour": "red"}, 422, "colour"),
        ]
        for body, status, message in cases:
            answer = client.post("/v1/verify", json=body)
            assert answer.status_code == status and message in answer.json()["detail"], (body, answer.text)
        big = client.post("/v1/verify/batch", content="\n".join(json.dumps({"claim": "c" * 10}) for _ in range(40)))
        assert big.status_code == 413 and "serve.max_body_bytes" in big.json()["detail"]
        assert client.post("/v1/verify", content=b"not json").status_code == 422
        assert client.get("/v1/jobs/none").status_code == 404
    finally:
        svc.worker.stop()


def test_bound_beyond_loopback_the_token_is_required(tmp_path, monkeypatch, caplog):
    assert bearer_token("127.0.0.1", "FACTRL_SERVE_TOKEN", {}) is None
    assert bearer_token("localhost", "FACTRL_SERVE_TOKEN", {}) is None
    with pytest.raises(ServeError, match="set the environment variable MY_TOKEN"):
        bearer_token("0.0.0.0", "MY_TOKEN", {})
    with pytest.raises(ServeError, match="MY_TOKEN"):
        bearer_token("10.1.2.3", "MY_TOKEN", {"MY_TOKEN": "  "})
    assert bearer_token("0.0.0.0", "MY_TOKEN", {"MY_TOKEN": "s3cret"}) == "s3cret"

    # `factrl serve --host 0.0.0.0` without the variable refuses to start, before loading anything
    params = tmp_path / "params.yaml"
    params.write_text("serve: {token_env: FACTRL_TEST_TOKEN, index: nowhere}\n")
    monkeypatch.delenv("FACTRL_TEST_TOKEN", raising=False)
    with pytest.raises(SystemExit, match="FACTRL_TEST_TOKEN"):
        main(["--params", str(params), "--host", "0.0.0.0"])

    caplog.set_level(logging.DEBUG)
    svc = make_service(tmp_path, token="s3cret-token")
    try:
        client = TestClient(app_of(svc))
        assert client.post("/v1/verify", json={"claim": "a"}).status_code == 401
        assert client.post("/v1/verify", json={"claim": "a"}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        good = {"Authorization": "Bearer s3cret-token"}
        job = client.post("/v1/verify", json={"claim": "a true one"}, headers=good)
        assert job.status_code == 200
        wait_done(client, job.json()["job_id"], headers=good)
        assert client.get("/healthz").json()["auth"] is True  # liveness needs no token
        assert client.get("/v1/corrections").status_code == 401
    finally:
        svc.worker.stop()
    assert "s3cret-token" not in caplog.text


def test_corrections_round_trip_and_export_read_back_by_the_claim_reader(client, tmp_path):
    job_id = client.post("/v1/verify", json={"claim": "Orsa was founded by Ilse Parrow, true."}).json()["job_id"]
    wait_done(client, job_id)
    bad = client.post("/v1/corrections", json={"job_id": job_id, "index": 0, "corrected_verdict": "REFUTES",
                                               "reviewer": "ana", "passage_id": "p9"})
    assert bad.status_code == 422 and "not cited" in bad.json()["detail"]
    assert client.post("/v1/corrections", json={"job_id": job_id, "index": 0, "corrected_verdict": "MAYBE",
                                                "reviewer": "ana"}).status_code == 422
    assert client.post("/v1/corrections", json={"job_id": job_id, "index": 0, "corrected_verdict": "REFUTES",
                                                "reviewer": " "}).status_code == 422
    saved = client.post("/v1/corrections", json={"job_id": job_id, "index": 0, "corrected_verdict": "REFUTES",
                                                 "reviewer": "ana", "passage_id": "p1"})
    assert saved.status_code == 200, saved.text
    stored = saved.json()
    assert stored["original_verdict"] == "SUPPORTS" and stored["accepted"] is False
    assert stored["checkpoint"] == "demo" and stored["index_hash"] == "cccc" and stored["created_utc"]
    assert [c["id"] for c in client.get("/v1/corrections").json()] == [stored["id"]]

    for fmt in ("parquet", "jsonl"):
        answer = client.get(f"/v1/corrections/export?format={fmt}")
        assert answer.status_code == 200
        path = tmp_path / f"export.{fmt}"
        path.write_bytes(answer.content)
        [row] = read_claims(path).to_pylist()
        assert row["claim"] == "Orsa was founded by Ilse Parrow, true." and row["label"] == "REFUTES"
        assert row["evidence_ids"] == ["p1"] and row["evidence"] == [PASSAGE[PASSAGE.index("Orsa was"):]]
        provenance = json.loads(row["explanation"])
        assert provenance["reviewer"] == "ana" and provenance["checkpoint_hash"] == "aaaa+bbbb"
        assert row["source"] == "corrections"
    assert client.get("/v1/corrections/export?format=csv").status_code == 422


def test_page_and_openapi_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    assert "/v1/corrections" in client.get("/static/app.js").text
    spec = client.get("/openapi.json").json()
    assert {"/v1/verify", "/v1/verify/batch", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/results.jsonl",
            "/v1/corrections", "/healthz"} <= set(spec["paths"])
    assert "claim" in json.dumps(spec["paths"]["/v1/verify"]["post"]["requestBody"])
    assert client.get("/docs").status_code == 200


@pytest.mark.slow
def test_factrl_serve_verifies_a_claim_end_to_end_with_smollm2(tmp_path, demo_world):
    """`factrl serve` as a process: real SmolLM2 agents over a demo world's BM25 index, a claim and a
    two-claim text verified over HTTP, citations only from the passages each claim's searches retrieved."""
    import sys
    import time

    import pyarrow.parquet as pq
    import yaml

    from factrl.servers import free_port, spawn

    claims, index_dir = demo_world
    passages = {p["id"]: p["text"] for p in pq.read_table(index_dir / "passages.parquet").to_pylist()}
    port = free_port()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "model": {"base": "smollm2-135m"},
        "serve": {"port": port, "index": str(index_dir), "retrieval_mode": "bm25", "device": "cpu",
                  "precision": "fp32", "max_turns": 2, "max_new_tokens": 48, "batch_size": 4,
                  "checkpoints": [{"name": "base", "reason": "base", "search": "base"}],
                  "corrections_db": str(tmp_path / "c.sqlite")}}))
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "factrl.cli", "serve", "--params", str(tmp_path / "params.yaml")]
    with spawn(command, f"{url}/healthz", timeout=300, name="factrl serve", log_path=tmp_path / "serve.log"), \
            httpx.Client(base_url=url, timeout=60) as client:
        claim = client.post("/v1/verify", json={"claim": claims[0]["claim"]}).json()["job_id"]
        text = f"{claims[1]['claim']} {claims[2]['claim']}"
        job = client.post("/v1/verify", json={"text": text}).json()
        assert job["total"] == 2
        started = time.monotonic()
        snaps = [wait_done(client, job_id, timeout=600) for job_id in (claim, job["job_id"])]
        seconds = time.monotonic() - started
        assert client.get("/healthz").json()["batches"] <= 2  # the three claims shared at most two batches
    results = [r for snap in snaps for r in snap["results"]]
    assert len(results) == 3 and all(r["status"] == "done" for r in results), results
    for r in results:
        assert r["verdict"] in ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO", None) and r["calibrated"] is False
        if r["verdict"] == "NOT ENOUGH INFO":  # the base model's verdict, not backed by what it cited
            assert r["abstained"] and r["model_verdict"] in ("SUPPORTS", "REFUTES")
            assert r["abstention"]["reasons"], r["abstention"]
        else:
            assert r["verdict"] == r["model_verdict"] and not r["abstained"]
        assert r["usage"]["model_calls"] >= 1 and r["usage"]["tokens_in"] > 0 and r["cost_usd"] == 0.0
        retrieved = {h["id"] for q in r["trace"]["questions"] for h in q["retrieved"]}
        for c in r["citations"]:
            assert c["passage_id"] in retrieved and passages[c["passage_id"]][c["start"]:c["end"]] == c["quote"]
    print(f"3 claims in {seconds:.1f} s; verdicts {[r['verdict'] for r in results]}; "
          f"citations {sum(len(r['citations']) for r in results)}")


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_page_runs_a_check_in_headless_chromium(tmp_path):
    """The page's own JavaScript, in a real browser against a real server: a link carrying a text
    fills the form, submits it, polls the job and renders each claim's card with its verdict, its
    cited sentence highlighted in the passage, and the review form."""
    import subprocess
    from urllib.parse import quote

    svc = make_service(tmp_path, max_wait_ms=10)
    text = "The film Orsa was a true story, released in 1994. Ilse Maro was born in Varna. Is it good?"
    try:
        with running_app(app_of(svc)) as url:
            cmd = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=15000",
                   "--dump-dom", f"{url}/#text={quote(text)}"]
            dom = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path).stdout
    finally:
        svc.worker.stop()
    assert "2 / 2 claims done" in dom, dom[-3000:]
    assert dom.count('class="card"') == 2
    assert '<span class="verdict SUPPORTS">SUPPORTS</span>' in dom and '<span class="verdict REFUTES">REFUTES</span>' in dom
    assert '<span class="quote">Orsa was founded by Ilse Parrow in Tessik.</span>' in dom  # the cited sentence
    assert dom.count("Save review") == 2 and '<option value="demo">demo</option>' in dom
    assert 'class="claim SUPPORTS"' in dom and 'class="claim REFUTES"' in dom  # the text, claims highlighted


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_a_reviewer_checks_claims_and_saves_a_correction_in_a_browser(tmp_path, request):
    """Playwright drives headless Chromium (the OS package) through the page against a real server:
    one claim, then a three-claim text (verdicts, highlights, quoted citations), then a correction
    saved from the page and found in the export. Screenshots of each state go to tmp_path (and to
    FACTRL_SCREENSHOTS when set: docs/service-page/ holds the committed ones)."""
    import os
    import shutil

    sync_api = pytest.importorskip("playwright.sync_api")
    svc = make_service(tmp_path, max_wait_ms=10)
    shots = []
    try:
        with running_app(app_of(svc)) as url, sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(url + "/")
            page.wait_for_selector('#checkpoint option[value="demo"]', state="attached")

            def shot(name: str) -> None:
                path = tmp_path / f"{name}.png"
                page.screenshot(path=str(path), full_page=True)
                shots.append(path)

            shot("1-empty")
            page.fill("#input", "The company Orsa was founded by Ilse Parrow, a true fact.")
            page.click("#submit")
            page.wait_for_selector("#card-0 .verdict")
            assert page.text_content("#card-0 .verdict") == "SUPPORTS"
            assert page.text_content("#card-0 .quote") == "Orsa was founded by Ilse Parrow in Tessik."
            shot("2-claim")

            page.check('input[name=kind][value=text]')
            page.fill("#input", "The film Orsa was a true story, released in 1994. Ilse Maro was born in Varna. "
                                "Tessik is located in Debix. Is it good?")
            page.click("#submit")
            page.wait_for_function("document.querySelectorAll('#results .card').length === 3")
            page.wait_for_selector("text=3 / 3 claims done")
            assert page.locator("#text .claim.SUPPORTS").count() == 1 and page.locator("#text .claim.REFUTES").count() == 2
            assert page.locator("#results .quote").count() == 3
            shot("3-text")

            card = page.locator("#card-1")
            card.locator("select[name=verdict]").select_option("SUPPORTS")
            card.locator("select[name=passage]").select_option("p1")
            card.locator("input[name=reviewer]").fill("Ada Reviewer")
            card.locator("text=Save review").click()
            card.locator(".saved").wait_for()
            assert "corrected" in card.locator(".saved").text_content()
            shot("4-corrected")
            browser.close()
            exported = httpx.get(f"{url}/v1/corrections/export", params={"format": "jsonl"}, timeout=30).text
    finally:
        svc.worker.stop()
    rows = [json.loads(line) for line in exported.splitlines()]
    assert len(rows) == 1 and rows[0]["claim"] == "Ilse Maro was born in Varna." and rows[0]["label"] == "SUPPORTS"
    assert "Ada Reviewer" in rows[0]["explanation"] and rows[0]["evidence"][0]["passage_id"] == "p1"
    if os.environ.get("FACTRL_SCREENSHOTS"):
        for path in shots:
            shutil.copy(path, os.environ["FACTRL_SCREENSHOTS"])


# --------------------------------------------------------------------------------------------
# The page against `factrl serve` over real checkpoints and a real BM25 index (tests/service/page_driver.py)
# --------------------------------------------------------------------------------------------


def _check_card_against_result(card: dict, result: dict, passages: dict[str, str]) -> None:
    """What a card shows is what the engine answered: verdict (or the explicit no-verdict state with
    its reason), the citations quoted in their passages, the trace."""
    assert result["status"] == "done" and card["claim"] == result["claim"]
    verdict = result["verdict"]
    assert card["verdict"] == (verdict or "no verdict") and card["verdict_class"] == f"verdict {verdict or 'none'}"
    if verdict is None:
        assert card["no_verdict"].startswith("no verdict: ") and (result["trace"]["format_error"] or "") in card["no_verdict"]
    else:
        assert card["no_verdict"] is None
    citations = result["citations"]
    assert card["citations_heading"] == f"Citations ({len(citations)})"
    assert card["quotes"] == [c["quote"] for c in citations]
    retrieved = {h["id"] for q in result["trace"]["questions"] for h in q["retrieved"]}
    for c in citations:  # from this claim's own searches, quoted verbatim from the index's passage
        assert c["passage_id"] in retrieved and passages[c["passage_id"]][c["start"]:c["end"]] == c["quote"]
    assert card["trace_summary"] == f"Trace: {len(result['trace']['questions'])} questions"
    assert card["reasoning"] == result["trace"]["reasoning"]


def _check_review(seen: dict, claim: str, text: str, corrected: str, passages: dict[str, str]) -> list[dict]:
    """The page matched the API for both jobs, highlighted the text's claims by verdict, and the saved
    review is the one row of the export; the API's results (the claim's, then the text's)."""
    [claim_result] = seen["claim_job"]["results"]
    assert claim_result["claim"] == claim
    _check_card_against_result(seen["claim_card"], claim_result, passages)
    text_job = seen["text_job"]
    results = sorted(text_job["results"], key=lambda r: r["index"])
    assert text_job["status"] == "done" and len(results) == len(seen["text_cards"]) == text_job["total"]
    for card, result in zip(seen["text_cards"], results, strict=True):
        _check_card_against_result(card, result, passages)
        assert text[result["start"]:result["end"]] == result["claim"]
    assert seen["highlights"] == [f"claim {r['verdict'] or 'none'}" for r in results]
    reviewed = results[1]
    assert ("accepted" if corrected == reviewed["verdict"] else "corrected") in seen["saved"]
    [row] = [json.loads(line) for line in seen["export"].splitlines()]
    assert row["claim"] == reviewed["claim"] and row["label"] == corrected and row["source"] == "corrections"
    provenance = json.loads(row["explanation"])
    assert provenance["reviewer"] == "Ada Reviewer" and provenance["original_verdict"] == reviewed["verdict"]
    if seen["passage_id"]:
        assert [e["passage_id"] for e in row["evidence"]] == [seen["passage_id"]]
    return [claim_result, *results]


def _keep_screenshots(shots) -> None:
    import os
    import shutil

    if os.environ.get("FACTRL_SCREENSHOTS"):
        for path in shots:
            shutil.copy(path, os.environ["FACTRL_SCREENSHOTS"])


def _text_of(claims: list[dict]) -> str:
    """Three demo-world claims and a question the decomposer must leave out."""
    return f"{claims[1]['claim']} {claims[2]['claim']} Is that not odd? {claims[3]['claim']}"


@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory):
    """HF directories of two tiny random Llamas (tests/rl/tiny.py) saved with SmolLM2's tokenizer:
    a reasoning and a search checkpoint that load like trained ones, in seconds."""
    from tests.rl.tiny import tiny_model, tokenizer

    root, tok = tmp_path_factory.mktemp("tiny-checkpoints"), tokenizer()
    for seed, agent in enumerate(("reason", "search")):
        tiny_model(tok, seed=seed).save_pretrained(root / agent)
        tok.save_pretrained(root / agent)
    return {"name": "tiny", "reason": str(root / "reason"), "search": str(root / "search")}


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_page_over_factrl_serve_with_tiny_checkpoints_shows_the_no_verdict_state(tmp_path, demo_world,
                                                                                      tiny_checkpoints):
    """The whole path page -> `factrl serve` -> engine (tiny random checkpoints on disk) -> BM25 index, in
    headless Chromium. A random model writes no valid verdict: the page must say so ("no verdict" and
    the format error, the claim highlighted as such, the trace with the model's text), not break, and a
    reviewer can still give the claim its label, which the export carries."""
    pytest.importorskip("playwright.sync_api")
    import pyarrow.parquet as pq

    from tests.service.page_driver import review_in_browser, serve_process

    claims, index_dir = demo_world
    passages = {p["id"]: p["text"] for p in pq.read_table(index_dir / "passages.parquet").to_pylist()}
    text, gold = _text_of(claims), claims[2]["label"]
    # abstention off: a random model's runs find no evidence, and a run without a verdict whose evidence
    # fails a rule is NOT ENOUGH INFO (factrl.agents.abstain.decide); this checks the no-verdict state
    with serve_process(tmp_path, index_dir, tiny_checkpoints, max_turns=1, max_new_tokens=16,
                       abstain={"enabled": False}) as url:
        seen = review_in_browser(url, claims[0]["claim"], text, 3, gold, tmp_path, "tiny", timeout_s=120)
    results = _check_review(seen, claims[0]["claim"], text, gold, passages)
    assert [r["verdict"] for r in results] == [None] * 4  # what a random model writes; the page showed it
    assert all(r["trace"]["format_valid"] is False and r["trace"]["reasoning"] for r in results)
    _keep_screenshots(seen["shots"])


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_page_over_factrl_serve_with_smollm2_shows_verdicts_and_citations(tmp_path, demo_world):
    """As above with SmolLM2-135M as both agents: the page shows verdicts, highlights and citations
    quoted in their passages, each from that claim's own searches, and the correction is exported."""
    pytest.importorskip("playwright.sync_api")
    import pyarrow.parquet as pq

    from tests.service.page_driver import review_in_browser, serve_process

    claims, index_dir = demo_world
    passages = {p["id"]: p["text"] for p in pq.read_table(index_dir / "passages.parquet").to_pylist()}
    text, gold = _text_of(claims), claims[2]["label"]
    checkpoint = {"name": "base", "reason": "base", "search": "base"}
    # abstention off: this checks that the page shows a real model's verdicts and citations; the base
    # model's ungrounded verdicts would become NOT ENOUGH INFO (test_page_not_enough_evidence.py)
    with serve_process(tmp_path, index_dir, checkpoint, base="smollm2-135m", max_turns=2, max_new_tokens=48,
                       abstain={"enabled": False}) as url:
        seen = review_in_browser(url, claims[0]["claim"], text, 3, gold, tmp_path, "smollm2", timeout_s=1200)
    results = _check_review(seen, claims[0]["claim"], text, gold, passages)
    assert all(r["verdict"] in ("SUPPORTS", "REFUTES") for r in results), [r["verdict"] for r in results]
    assert all(r["citations"] for r in results), [len(r["citations"]) for r in results]
    _keep_screenshots(seen["shots"])
    print(f"verdicts {[r['verdict'] for r in results]}; citations {[len(r['citations']) for r in results]}")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
@pytest.mark.skipif(not os.environ.get("FACTRL_TRAINED_RUN"),
                    reason="FACTRL_TRAINED_RUN names no finished run (a `make demo` checkout) to serve")
def test_the_page_over_factrl_serve_with_a_trained_run(tmp_path):
    """The page over a finished run's trained HARIS pair (``$FACTRL_TRAINED_RUN``: a ``make demo``
    checkout; ``models/reason_<r>`` / ``search_<r>`` with ``r`` = ``$FACTRL_TRAINED_ROUND``, default 1),
    its index (hybrid, as ``evaluate`` searches) and its held-out claims (eval.parquet, never trained
    on), with the run's ``evaluate`` limits: verdicts, highlights, citations from each claim's own
    searches, and the correction exported. Opt-in because it needs a run's checkpoints (minutes of
    ``make demo``); the default suite drives the same page over tiny checkpoints."""
    pytest.importorskip("playwright.sync_api")
    import pyarrow.parquet as pq

    from factrl.config import from_dict, read_params
    from factrl.eval.params import EvaluateParams
    from tests.service.page_driver import review_in_browser, serve_process

    run = Path(os.environ["FACTRL_TRAINED_RUN"])
    round_ = os.environ.get("FACTRL_TRAINED_ROUND", "1")
    evaluate = from_dict(EvaluateParams, read_params(run / "params.yaml").get("evaluate"),
                         where=f"{run / 'params.yaml'}:evaluate")
    claims = pq.read_table(run / "data" / "claims" / "eval.parquet").to_pylist()
    index_dir = run / "index"
    passages = {p["id"]: p["text"] for p in pq.read_table(index_dir / "passages.parquet").to_pylist()}
    text, gold = _text_of(claims), claims[2]["label"]
    # named as evaluate names it, so the service finds the map evaluate fitted for it
    checkpoint = {"name": "HARIS (trained)", "reason": str(run / "models" / f"reason_{round_}"),
                  "search": str(run / "models" / f"search_{round_}")}
    with serve_process(tmp_path, index_dir, checkpoint, max_turns=evaluate.max_turns,
                       max_new_tokens=evaluate.max_new_tokens, retrieval_mode=evaluate.retrieval_mode,
                       precision="auto", calibration_dir=run / "metrics" / "calibration", timeout=600) as url:
        seen = review_in_browser(url, claims[0]["claim"], text, 3, gold, tmp_path, "trained", timeout_s=1800)
    results = _check_review(seen, claims[0]["claim"], text, gold, passages)
    assert all(r["verdict"] in ("SUPPORTS", "REFUTES") for r in results), [r["verdict"] for r in results]
    assert all(r["citations"] for r in results), [len(r["citations"]) for r in results]
    assert all(r["calibrated"] and 0.0 <= r["confidence"] <= 1.0 for r in results)  # evaluate's map, used
    _keep_screenshots(seen["shots"])
    print(f"confidence {[round(r['confidence'], 3) for r in results]}; verdicts {[r['verdict'] for r in results]} (gold {[c['label'] for c in claims[:4]]}); "
          f"citations {[len(r['citations']) for r in results]}")
