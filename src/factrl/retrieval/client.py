"""httpx client for the retrieval service, retrying transient failures.

Connection errors, timeouts and 5xx/429 answers are retried with exponential backoff; a 4xx
answer means the request itself is wrong, so it is raised at once with the server's message.
A server bound beyond loopback wants a bearer token: the client sends the one in the environment
variable ``FACTRL_RETRIEVER_TOKEN`` when it is set (the key stays out of reprs and errors).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import httpx

from factrl.retrieval.index import Hit

RETRY_STATUS = {429, 500, 502, 503, 504}
TOKEN_ENV = "FACTRL_RETRIEVER_TOKEN"  # as factrl.retrieval.server reads it (not imported: no FastAPI here)


class RetrievalError(RuntimeError):
    """The server rejected a request or stayed unavailable through every retry."""


def _parse(body: dict, return_scores: bool) -> list[list[Hit]]:
    rows = []
    for row in body["result"]:
        hits = []
        for item in row:
            doc, score = (item["document"], float(item["score"])) if return_scores else (item, 0.0)
            title, _, text = doc["contents"].partition("\n")
            hits.append(Hit(doc["id"], title.strip('"'), text, score))
        rows.append(hits)
    return rows


class RetrievalClient:
    """Calls ``POST /retrieve`` on a factrl (or Search-R1 compatible) retrieval server."""

    def __init__(
        self,
        base_url: str,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        token = os.environ.get(TOKEN_ENV, "").strip()
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self.http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport, headers=headers)
        self.retries = retries
        self.backoff = backoff

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RetrievalClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _post(self, payload: dict) -> dict:
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                response = self.http.post("/retrieve", json=payload)
            except httpx.TransportError as exc:
                last = exc
                continue
            if response.status_code in RETRY_STATUS:
                last = RetrievalError(f"HTTP {response.status_code}: {response.text[:500]}")
                continue
            if response.status_code >= 400:
                raise RetrievalError(f"HTTP {response.status_code}: {response.text[:2000]}")
            return response.json()
        raise RetrievalError(f"retrieval failed after {self.retries + 1} attempts: {last}") from last

    def search(
        self, queries: Sequence[str], k: int = 3, return_scores: bool = True
    ) -> list[list[Hit]]:
        """Top-``k`` hits per query (scores are 0.0 when ``return_scores`` is false)."""
        body = self._post({"queries": list(queries), "topk": k, "return_scores": return_scores})
        return _parse(body, return_scores)

    def health(self) -> dict:
        response = self.http.get("/health")
        response.raise_for_status()
        return response.json()
