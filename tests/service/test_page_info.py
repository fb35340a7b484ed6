"""What the page shows a newcomer (issue 49): examples drawn from the served corpus, which corpus and
checkpoint answer, a favicon, and validation errors a person can read (no library documentation links)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from fastapi.testclient import TestClient

from factrl.service.examples import OUTSIDE_EXAMPLE, corpus_examples
from factrl.testing.service_fakes import app_of, make_service


def test_examples_are_first_sentences_of_the_served_passages(tmp_path):
    texts = [f"Entity {i} is a city in Land {i}. About {i}000 people live there." for i in range(9)]
    pq.write_table(pa.table({"id": [str(i) for i in range(9)], "title": [f"Entity {i}" for i in range(9)],
                             "text": texts}), tmp_path / "passages.parquet")
    info = corpus_examples(tmp_path, n=3)
    assert info["corpus"] == {"index": str(tmp_path), "passages": 9}
    claims = [e["claim"] for e in info["examples"]]
    assert claims[-1] == OUTSIDE_EXAMPLE and len(claims) == 4
    assert all(any(t.startswith(c) for t in texts) for c in claims[:3]) and len(set(claims[:3])) == 3


def test_page_info_favicon_and_readable_validation_errors(tmp_path):
    service = make_service(tmp_path)
    service.info.update({"corpus": {"index": "index", "passages": 9}, "models": {"demo": {"reason": "r", "search": "s"}},
                         "examples": [{"claim": "Entity 1 is a city in Land 1.", "kind": "in corpus"}]})
    try:
        client = TestClient(app_of(service))
        info = client.get("/page-info").json()
        assert info["corpus"]["passages"] == 9 and info["examples"][0]["claim"].startswith("Entity 1")
        icon = client.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
        for body in ('{"claim": 5}', '{"claim": "x", "bogus": 1}', "{not json"):
            answer = client.post("/v1/verify", content=body, headers={"Content-Type": "application/json"})
            assert answer.status_code == 422
            detail = answer.json()["detail"]
            assert "pydantic" not in detail and "http" not in detail, detail
        assert "claim: Input should be a valid string" in client.post("/v1/verify", json={"claim": 5}).json()["detail"]
        page = client.get("/").text
        assert 'rel="icon"' in page and 'id="examples"' in page and 'id="answering"' in page
    finally:
        service.worker.stop()
