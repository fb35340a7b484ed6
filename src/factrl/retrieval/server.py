"""HTTP retrieval service compatible with Search-R1's retrieval server and verl's search tool.

``POST /retrieve {"queries": [...], "topk": 3, "return_scores": true}`` answers
``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`` (one list per query), or
``{"result": [[{"id", "contents"}, ...], ...]}`` without scores. ``contents`` is
``"<title>"\\n<text>``, the layout those clients split on to show a title line.
``GET /health`` reports the index size and mode.

Binds 127.0.0.1 unless told otherwise. Bound to any other address it refuses to start unless the
environment variable ``FACTRL_RETRIEVER_TOKEN`` holds a token, and then ``/retrieve`` answers only
requests carrying ``Authorization: Bearer <token>`` (``RetrievalClient`` sends it from the same
variable); ``/health`` stays open for liveness probes. Requests with too many
queries, too long queries or a ``topk`` out of range get a 422 with a message, a body over
``Limits.max_body_bytes`` a 413, so one caller
cannot make the single-process server spend minutes on a request.

Concurrent requests are micro-batched: the first waiting request opens a window of a few
milliseconds, every request arriving in it joins, and the lot runs as one batched
``Retriever.search`` per distinct ``topk`` (one encoder pass, one FAISS call). Agents in a rollout
send one short query per request, and a batch of 16 queries costs far less than 16 single calls,
so this is what lets HTTP throughput approach in-process batched search.
"""

# No `from __future__ import annotations`: FastAPI must resolve the request model, which is
# defined inside create_app (its bounds come from Limits), from a real annotation.

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Depends, FastAPI
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field, field_validator

from factrl.retrieval.index import Hit, Retriever
from factrl.servers import (
    BodyLimit,
    UnsafeBind,
    answer_invalid_bodies_cleanly,
    bearer_dependency,
    required_token,
)

TOKEN_ENV = "FACTRL_RETRIEVER_TOKEN"  # the bearer token of a retriever bound beyond loopback


@dataclass(frozen=True)
class Limits:
    """Per-request bounds enforced by the server."""

    max_queries: int = 256
    max_query_chars: int = 2048
    max_topk: int = 100
    max_body_bytes: int = 4 * 1024 * 1024  # a larger body is answered 413 before it is parsed


@dataclass(frozen=True)
class BatchPolicy:
    """Cross-request micro-batching.

    max_wait_ms: how long the first request of a batch waits for others to join (0 = only
        requests already queued join).
    max_queries: queries per batched search; a batch closes as soon as it holds this many.
    """

    max_wait_ms: float = 5.0
    max_queries: int = 256


@dataclass
class _Pending:
    queries: list[str]
    k: int
    future: asyncio.Future = field(repr=False)


class MicroBatcher:
    """Gathers concurrent requests and answers them with one batched search per ``topk``.

    Searches run one at a time in a worker thread (the encoder and FAISS already use every core
    for one call, so concurrent searches would only oversubscribe the CPU); while one runs, the
    next batch accumulates in the queue.
    """

    def __init__(self, search: Callable[[list[str], int], list[list[Hit]]],
                 policy: BatchPolicy = BatchPolicy()) -> None:
        self.search = search
        self.policy = policy
        self.queue: asyncio.Queue[_Pending] | None = None
        self.worker: asyncio.Task | None = None
        self.batches = 0  # batched searches run, for /health and the benchmark
        self.queries = 0

    async def submit(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Top-``k`` hits for ``queries``, searched together with other concurrent requests."""
        if self.worker is None or self.worker.done():
            # Created lazily, inside the server's running event loop.
            self.queue = asyncio.Queue()
            self.worker = asyncio.get_running_loop().create_task(self._run())
        future = asyncio.get_running_loop().create_future()
        await self.queue.put(_Pending(queries, k, future))
        return await future

    async def _gather(self) -> list[_Pending]:
        batch = [await self.queue.get()]
        size = len(batch[0].queries)
        deadline = asyncio.get_running_loop().time() + self.policy.max_wait_ms / 1000
        while size < self.policy.max_queries:
            if not self.queue.empty():
                item = self.queue.get_nowait()
            else:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self.queue.get(), left)
                except TimeoutError:
                    break
            batch.append(item)
            size += len(item.queries)
        return batch

    async def _run(self) -> None:
        while True:
            batch = await self._gather()
            by_k: dict[int, list[_Pending]] = {}
            for item in batch:
                by_k.setdefault(item.k, []).append(item)
            for k, items in by_k.items():
                await self._search_group(k, items)

    async def _search_group(self, k: int, items: list[_Pending]) -> None:
        queries = [q for item in items for q in item.queries]
        try:
            hits = await run_in_threadpool(self.search, queries, k)
        except Exception as exc:  # every waiting request gets the error, the worker lives on
            for item in items:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        self.batches += 1
        self.queries += len(queries)
        start = 0
        for item in items:
            if not item.future.done():  # a cancelled request (client went away) is skipped
                item.future.set_result(hits[start : start + len(item.queries)])
            start += len(item.queries)


def _contents(hit: Hit) -> str:
    return f'"{hit.title}"\n{hit.text}'


def format_hits(hits: list[list[Hit]], return_scores: bool) -> dict:
    """Search-R1 / verl response body for ``hits``."""
    if return_scores:
        result = [
            [{"document": {"id": h.id, "contents": _contents(h)}, "score": h.score} for h in row]
            for row in hits
        ]
    else:
        result = [[{"id": h.id, "contents": _contents(h)} for h in row] for row in hits]
    return {"result": result}


def create_app(
    retriever: Retriever, limits: Limits = Limits(), batching: BatchPolicy = BatchPolicy(),
    token: str | None = None,
) -> FastAPI:
    """A FastAPI app serving ``retriever`` under ``limits``, micro-batching per ``batching``;
    ``/retrieve`` needs ``Bearer <token>`` when ``token`` is set."""

    class RetrieveRequest(BaseModel):
        queries: list[str] = Field(min_length=1, max_length=limits.max_queries)
        topk: int = Field(default=3, ge=1, le=limits.max_topk)
        return_scores: bool = False

        @field_validator("queries")
        @classmethod
        def _short_queries(cls, queries: list[str]) -> list[str]:
            for i, q in enumerate(queries):
                if len(q) > limits.max_query_chars:
                    raise ValueError(
                        f"query {i} has {len(q)} characters; the limit is {limits.max_query_chars}"
                    )
            return queries

    app = FastAPI(title="factrl retriever")
    answer_invalid_bodies_cleanly(app)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, setting="Limits.max_body_bytes")
    batcher = MicroBatcher(retriever.search, batching)
    app.state.batcher = batcher

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "passages": len(retriever), "mode": retriever.mode,
                "embedder": retriever.manifest.get("embedder"),
                "batched_searches": batcher.batches, "queries_served": batcher.queries}

    @app.post("/retrieve", dependencies=[Depends(bearer_dependency(token))])
    async def retrieve(request: RetrieveRequest) -> dict:
        hits = await batcher.submit(request.queries, request.topk)
        return format_hits(hits, request.return_scores)

    return app


def serve(
    index_dir: str,
    mode: str = "dense",
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: Limits = Limits(),
    batching: BatchPolicy = BatchPolicy(),
    device: str = "auto",
) -> None:
    """Load the index (its query embedder on ``device``) and serve it with uvicorn until interrupted;
    :class:`~factrl.servers.UnsafeBind` before loading anything when ``host`` is not loopback and
    ``FACTRL_RETRIEVER_TOKEN`` is unset."""
    import uvicorn

    token = required_token(host, TOKEN_ENV, "factrl serve-retriever")
    app = create_app(Retriever(index_dir, mode=mode, device=device), limits, batching, token)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``factrl serve-retriever``."""
    import argparse

    parser = argparse.ArgumentParser(prog="factrl serve-retriever", description="serve an index over HTTP")
    parser.add_argument("--index", default="index", help="index directory written by the index stage")
    parser.add_argument("--mode", default="dense", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--host", default="127.0.0.1", help=f"bind address (loopback unless told otherwise; any "
                                                             f"other address needs a bearer token in ${TOKEN_ENV})")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--batch-wait-ms", type=float, default=BatchPolicy.max_wait_ms,
                        help="how long a request waits for concurrent ones to share its search")
    parser.add_argument("--batch-queries", type=int, default=BatchPolicy.max_queries,
                        help="most queries in one batched search")
    parser.add_argument("--device", default="auto",
                        help="where the query embedder runs: auto (CUDA when visible, else CPU), cpu, cuda or cuda:N")
    args = parser.parse_args(argv)
    try:
        serve(args.index, mode=args.mode, host=args.host, port=args.port,
              batching=BatchPolicy(args.batch_wait_ms, args.batch_queries), device=args.device)
    except UnsafeBind as err:
        raise SystemExit(str(err)) from None
