"""The routes of ``factrl serve``, grouped in routers (``factrl.service.app`` lists the endpoints and
mounts these): :data:`health` and :data:`page` are public; :data:`verify`, :data:`jobs` and
:data:`corrections` are mounted behind the bearer token.

Every route reaches the :class:`~factrl.service.state.Service` through ``app.state.service``
(:func:`service_of`), so the routers are module-level and the app only decides which need the token.
Bodies are read by hand, streamed with their size counted as they arrive (:func:`read_body`), then
parsed: a body over ``serve.max_body_bytes`` is refused before the rest of it is read.
"""

# No `from __future__ import annotations`: FastAPI resolves the request models and the dependencies
# from real annotations.

import asyncio
import contextlib
import json
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import FileResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import ClientDisconnect

from factrl.service.corrections import Correction, export_claims
from factrl.service.decompose import split_claims
from factrl.service.jobs import ClaimItem, Job, QueueFull
from factrl.service.state import Service
from factrl.verify.decompose import DecomposeError

STATIC = Path(__file__).with_name("static")


def service_of(request: Request) -> Service:
    """The service the app was created over (``factrl.service.app.create_app`` sets it)."""
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(service_of)]


class VerifyRequest(BaseModel):
    """A claim, or a text to split into claims; ``checkpoint``: a name of ``serve.checkpoints``
    (default: the first); ``id``: the caller's id of a single claim."""

    model_config = ConfigDict(extra="forbid")
    claim: str | None = None
    text: str | None = None
    checkpoint: str | None = None
    id: str | None = None


class CorrectionRequest(BaseModel):
    """A reviewer's decision on a result: ``job_id`` and ``index`` name it (claim, original verdict,
    checkpoint and citations are taken from there); ``passage_id``: the cited passage that settles it."""

    model_config = ConfigDict(extra="forbid")
    job_id: str
    index: int
    corrected_verdict: str
    reviewer: str
    passage_id: str | None = None
    note: str | None = None


# --------------------------------------------------------------------------------------------
# shared by the routes
# --------------------------------------------------------------------------------------------


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, at most ``limit`` bytes: a declared ``Content-Length`` over it is a 413 before
    any byte is read, a streamed (chunked) one a 413 at the first chunk that passes it, the rest unread.
    Chunks are joined once at the end (appending to ``bytes`` would copy the body at every chunk)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"request body of {declared} bytes exceeds serve.max_body_bytes ({limit})")
    chunks: list[bytes] = []
    size = 0
    try:
        async with contextlib.aclosing(request.stream()) as stream:
            async for chunk in stream:
                size += len(chunk)
                if size > limit:
                    raise HTTPException(413, f"request body exceeds serve.max_body_bytes ({limit})")
                chunks.append(chunk)
    except ClientDisconnect:  # hung up mid-body: nothing to do, and no traceback in the log
        raise HTTPException(499, "the client closed the connection before sending the whole body") from None
    return b"".join(chunks)


def checkpoint_of(service: Service, name: str | None) -> str:
    """``name``, checked against ``serve.checkpoints`` (422 when unknown); the first when None."""
    if name is None:
        return service.checkpoints[0]
    if name not in service.worker.verifiers:
        raise HTTPException(422, f"checkpoint: unknown checkpoint {name!r}; known: {service.checkpoints}")
    return name


def start_job(service: Service, checkpoint: str, items: list[ClaimItem], text: str | None = None) -> dict:
    """Queue ``items`` as one job: its id and claims; 413 over ``max_claims_per_job``, 503 with
    ``Retry-After`` when the claim queue cannot take them (the job is then forgotten, nothing ran)."""
    params = service.params
    if len(items) > params.max_claims_per_job:
        raise HTTPException(413, f"{len(items)} claims exceed serve.max_claims_per_job ({params.max_claims_per_job})")
    job = service.store.create(checkpoint, items, text)
    try:
        service.worker.submit(job)
    except QueueFull as full:
        service.store.discard(job)
        raise HTTPException(503, str(full), headers={"Retry-After": str(full.retry_after_s)}) from None
    return {"job_id": job.id, "total": job.total,
            "claims": [{"index": i.index, "id": i.id, "claim": i.claim, "start": i.start, "end": i.end}
                       for i in items]}


def job_or_404(service: Service, job_id: str) -> Job:
    job = service.store.get(job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id!r} (unknown, or dropped after serve.max_jobs finished jobs)")
    return job


def parse_batch(body: bytes, max_claim_chars: int) -> list[ClaimItem]:
    """The claims of a JSONL batch body; a line that is not a claim is a 422 naming it (1-based) and
    the field; ids default to the line number and must be unique."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise HTTPException(422, f"body: invalid UTF-8 at byte {err.start}") from None
    items: list[ClaimItem] = []
    ids: dict[str, int] = {}  # id -> the line that gave it
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise HTTPException(422, f"line {number}: malformed JSON: {err.msg} (column {err.colno})") from None
        if not isinstance(record, dict):
            raise HTTPException(422, f"line {number}: expected a JSON object, got {type(record).__name__}")
        claim = record.get("claim")
        if claim is None:
            raise HTTPException(422, f"line {number}: field 'claim': required field is missing")
        if not isinstance(claim, str):
            raise HTTPException(422, f"line {number}: field 'claim': expected a string, got {type(claim).__name__}")
        if not claim.strip():
            raise HTTPException(422, f"line {number}: field 'claim': empty claim")
        if len(claim) > max_claim_chars:
            raise HTTPException(413, f"line {number}: field 'claim': {len(claim)} characters exceed "
                                     f"serve.max_claim_chars ({max_claim_chars})")
        cid = record.get("id", number)
        if isinstance(cid, bool) or not isinstance(cid, (str, int)):
            raise HTTPException(422, f"line {number}: field 'id': expected a string or an integer, got {cid!r}")
        if str(cid) in ids:
            raise HTTPException(422, f"line {number}: field 'id': {cid!r} repeats line {ids[str(cid)]}")
        ids[str(cid)] = number
        items.append(ClaimItem(len(items), str(cid), claim.strip()))
    return items


# --------------------------------------------------------------------------------------------
# public: liveness and the page
# --------------------------------------------------------------------------------------------

health = APIRouter(tags=["health"])


@health.get("/healthz")
def healthz(service: ServiceDep) -> dict:
    """Liveness, the checkpoint names, and the batching counters (no token needed): claims queued
    and the queue's bound, batched calls and claims run, jobs held (unfinished among them)."""
    stats = service.worker.stats
    return {"status": "ok", "checkpoints": service.checkpoints, "queued": service.worker.queued,
            "max_queued": service.worker.max_queued, "batches": stats.batches, "claims_run": stats.claims,
            "jobs": len(service.store.jobs), "jobs_unfinished": service.store.unfinished,
            "auth": service.token is not None}


page = APIRouter(include_in_schema=False)


@page.get("/")
def index_page() -> FileResponse:
    return FileResponse(STATIC / "index.html")


@page.get("/favicon.ico")
def favicon() -> FileResponse:
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")


@page.get("/page-info")
def page_info(service: ServiceDep) -> dict:
    """What the page says it answers from: the corpus (index and passage count), each checkpoint's
    models and calibration, and example claims drawn from the corpus (``factrl.service.examples``)."""
    return {"corpus": service.info.get("corpus"), "examples": service.info.get("examples", []),
            "models": service.info.get("models", {}), "calibrated": service.info.get("calibrated", {})}


# --------------------------------------------------------------------------------------------
# behind the token: verifying, jobs, corrections
# --------------------------------------------------------------------------------------------

verify = APIRouter(prefix="/v1", tags=["verify"])

# the bodies are read by hand (size-limited while streamed, before parsing); their schemas are
# declared for /docs
_VERIFY_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": VerifyRequest.model_json_schema()}}}}
_BATCH_BODY = {"requestBody": {"required": True, "content": {
    "application/x-ndjson": {"schema": {"type": "string", "example": '{"id": "c1", "claim": "..."}\n'}}}}}
_LIMITS = ("max_claim_chars", "max_text_chars", "max_claims_per_job", "max_body_bytes", "max_queued_claims",
           "batch_size", "max_wait_ms", "max_gather_ms")


@verify.get("/info")
def info(service: ServiceDep) -> dict:
    """The models behind each checkpoint, whether each is calibrated, and the limits in force."""
    return service.info | {"limits": {k: getattr(service.params, k) for k in _LIMITS},
                           "provenance": service.provenance}


@verify.post("/verify", openapi_extra=_VERIFY_BODY)
async def verify_claim_or_text(request: Request, service: ServiceDep) -> dict:
    """Verify one claim (``claim``) or every claim of a text (``text``); answers a job id."""
    params = service.params
    try:
        body = VerifyRequest.model_validate_json(await read_body(request, params.max_body_bytes))
    except ValidationError as err:  # each error by field, without pydantic's documentation link
        raise HTTPException(422, "body: " + "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in err.errors())) from None
    except ValueError as err:
        raise HTTPException(422, f"body: {err}") from None
    if (body.claim is None) == (body.text is None):
        raise HTTPException(422, "body: give exactly one of 'claim' and 'text'")
    checkpoint = checkpoint_of(service, body.checkpoint)
    if body.claim is not None:
        claim = body.claim.strip()
        if not claim:
            raise HTTPException(422, "claim: empty claim")
        if len(claim) > params.max_claim_chars:
            raise HTTPException(413, f"claim: {len(claim)} characters exceed serve.max_claim_chars "
                                     f"({params.max_claim_chars})")
        return start_job(service, checkpoint, [ClaimItem(0, body.id or "0", claim)])
    text = body.text
    if not text.strip():
        raise HTTPException(422, "text: empty text")
    if len(text) > params.max_text_chars:
        raise HTTPException(413, f"text: {len(text)} characters exceed serve.max_text_chars ({params.max_text_chars})")
    try:
        spans = await asyncio.to_thread(split_claims, text, params.decomposer, params.decomposer_model)
    except DecomposeError as err:  # an endpoint's reply that is not the claims asked for
        raise HTTPException(502, f"text: the {params.decomposer} decomposer failed: {err}") from None
    if not spans:
        raise HTTPException(422, "text: no claim found in the text")
    long = [s for s in spans if len(s.text) > params.max_claim_chars]
    if long:
        raise HTTPException(413, f"text: the claim at characters {long[0].start}-{long[0].end} is longer than "
                                 f"serve.max_claim_chars ({params.max_claim_chars})")
    items = [ClaimItem(i, str(i), s.text, s.start, s.end) for i, s in enumerate(spans)]
    return start_job(service, checkpoint, items, text)


@verify.post("/verify/batch", openapi_extra=_BATCH_BODY)
async def verify_batch(request: Request, service: ServiceDep, checkpoint: str | None = Query(None)) -> dict:
    """Verify a JSONL body of claims, one ``{"id": ..., "claim": ...}`` object per line."""
    body = await read_body(request, service.params.max_body_bytes)
    items = parse_batch(body, service.params.max_claim_chars)
    if not items:
        raise HTTPException(422, "body: no claim lines (send JSONL: one {\"id\", \"claim\"} object per line)")
    return start_job(service, checkpoint_of(service, checkpoint), items)


jobs = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@jobs.get("/{job_id}")
def job(job_id: str, service: ServiceDep) -> dict:
    """Progress (``done`` of ``total``) and the results finished so far, in claim order."""
    return job_or_404(service, job_id).snapshot()


@jobs.get("/{job_id}/results.jsonl")
async def results(job_id: str, service: ServiceDep) -> StreamingResponse:
    """Every result as one JSON line, sent as it finishes; the stream ends with the job."""
    job = job_or_404(service, job_id)

    async def lines():
        sent = 0
        while True:
            new = service.store.finished_since(job, sent)
            for result in new:
                yield json.dumps(result) + "\n"
            sent += len(new)
            if sent >= job.total:
                return
            await asyncio.sleep(0.05)

    return StreamingResponse(lines(), media_type="application/x-ndjson")


corrections = APIRouter(prefix="/v1/corrections", tags=["corrections"])


@corrections.post("")
def correct(body: CorrectionRequest, service: ServiceDep) -> dict:
    """Store a reviewer's decision on a finished result, with its provenance."""
    job = job_or_404(service, body.job_id)
    result = job.results.get(body.index)
    if result is None:
        raise HTTPException(422, f"index: claim {body.index} of job {body.job_id} has no result yet")
    quote = None
    if body.passage_id is not None:
        cited = {c["passage_id"]: c["quote"] for c in result.get("citations") or []}
        if body.passage_id not in cited:
            raise HTTPException(422, f"passage_id: {body.passage_id!r} is not cited by this result "
                                     f"(cited: {sorted(cited)})")
        quote = cited[body.passage_id]
    provenance = service.provenance[job.checkpoint]
    try:
        stored = service.corrections.add(Correction(
            reviewer=body.reviewer, claim=result["claim"], original_verdict=result.get("verdict"),
            corrected_verdict=body.corrected_verdict, passage_id=body.passage_id, quote=quote,
            job_id=job.id, note=body.note, checkpoint=job.checkpoint,
            checkpoint_hash=provenance["checkpoint_hash"], index_hash=provenance["index_hash"],
            params_hash=provenance["params_hash"]))
    except ValueError as err:
        raise HTTPException(422, str(err)) from None
    return vars(stored) | {"accepted": stored.accepted}


@corrections.get("")
def list_corrections(service: ServiceDep) -> list[dict]:
    """Every stored correction, oldest first."""
    return [vars(c) | {"accepted": c.accepted} for c in service.corrections.all()]


_EXPORT_TYPES = {"parquet": "application/vnd.apache.parquet", "jsonl": "application/x-ndjson"}


@corrections.get("/export")
def export(service: ServiceDep, format: str = Query("parquet", pattern="^(parquet|jsonl)$")) -> Response:
    """The corrections as a claim file (CLAIMS schema) for ``prepare``: Parquet or JSONL."""
    name = f"corrections.{format}"
    # written where the claim writer can write it atomically, read back and removed before answering:
    # nothing is left behind, not even when the client hangs up mid-download (a FileResponse's
    # clean-up task would not run then). export_claims holds every row in memory anyway.
    with tempfile.TemporaryDirectory(prefix="factrl-corrections-") as tmp:
        content = export_claims(service.corrections.all(), Path(tmp) / name).read_bytes()
    return Response(content, media_type=_EXPORT_TYPES[format],
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


PUBLIC = (health, page)
AUTHORIZED = (verify, jobs, corrections)
