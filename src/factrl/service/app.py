"""The FastAPI app of ``factrl serve``, its bearer token, and ``main``.

Endpoints (OpenAPI at ``/docs``):

* ``POST /v1/verify`` ``{"claim": ...}`` or ``{"text": ...}`` (split into claims first), optional
  ``checkpoint``: -> ``{"job_id", "claims"}``;
* ``POST /v1/verify/batch?checkpoint=NAME``: a JSONL body, one ``{"id", "claim"}`` per line -> the same;
* ``GET /v1/jobs/{id}``: progress (claims done / total) and the results finished so far;
* ``GET /v1/jobs/{id}/results.jsonl``: the results as JSONL, streamed as they finish;
* ``POST /v1/corrections``, ``GET /v1/corrections``, ``GET /v1/corrections/export?format=parquet|jsonl``;
* ``GET /healthz``; ``GET /``: the web page (static HTML and vanilla JS, ``static/``).

Bad input is a 4xx naming what is wrong: 413 for a body, claim or text over the limits of params
``serve``, 422 for an empty claim, an unknown checkpoint or a batch line that is no claim (its line
number and field), 404 for an unknown job. Bound to anything but loopback, every ``/v1`` call needs
``Authorization: Bearer <token>``, the token read from the environment variable ``serve.token_env``;
without it the service refuses to start.
"""

# No `from __future__ import annotations`: FastAPI resolves the request models from real annotations.

import argparse
import asyncio
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict
from starlette.requests import ClientDisconnect

from factrl.servers import UnsafeBind, bearer_dependency, required_token
from factrl.service.corrections import Correction, CorrectionStore, export_claims
from factrl.service.decompose import split_claims
from factrl.service.jobs import BatchWorker, ClaimItem, JobStore
from factrl.service.params import ServeParams
from factrl.verify.decompose import DecomposeError

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")


class ServeError(RuntimeError):
    """The service cannot start as configured (a clear message for the command line)."""


def bearer_token(host: str, token_env: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The token requests must carry (:func:`factrl.servers.required_token`): None on loopback;
    elsewhere the value of ``token_env``, and a :class:`ServeError` when it is unset or empty."""
    try:
        return required_token(host, token_env, "factrl serve", environ)
    except UnsafeBind as err:
        raise ServeError(f"{err} (params serve.token_env names the variable)") from None


@dataclass
class Service:
    """What the app serves: the worker and verifiers behind it, the job and correction stores, the
    provenance of each checkpoint (``{"checkpoint_hash", "index_hash", "params_hash"}`` by name)."""

    params: ServeParams
    worker: BatchWorker
    store: JobStore
    corrections: CorrectionStore
    provenance: Mapping[str, Mapping[str, str]]
    token: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def checkpoints(self) -> list[str]:
        return list(self.worker.verifiers)


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


def create_app(service: Service) -> FastAPI:
    """The app over ``service`` (see the module docstring)."""
    app = FastAPI(title="factrl verifier", version="1",
                  description="Verify claims or texts with HARIS over the index: verdicts, calibrated "
                              "confidence, citations, traces and cost; reviewers' corrections.")
    params = service.params

    authorize = bearer_dependency(service.token)

    def checkpoint_of(name: str | None) -> str:
        if name is None:
            return service.checkpoints[0]
        if name not in service.worker.verifiers:
            raise HTTPException(422, f"checkpoint: unknown checkpoint {name!r}; known: {service.checkpoints}")
        return name

    async def limited_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > params.max_body_bytes:
            raise HTTPException(413, f"request body of {declared} bytes exceeds serve.max_body_bytes "
                                     f"({params.max_body_bytes})")
        body = b""
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > params.max_body_bytes:
                    raise HTTPException(413, f"request body exceeds serve.max_body_bytes ({params.max_body_bytes})")
        except ClientDisconnect:  # hung up mid-body: nothing to do, and no traceback in the log
            raise HTTPException(499, "the client closed the connection before sending the whole body") from None
        return body

    def start_job(checkpoint: str, items: list[ClaimItem], text: str | None = None) -> dict:
        if len(items) > params.max_claims_per_job:
            raise HTTPException(413, f"{len(items)} claims exceed serve.max_claims_per_job ({params.max_claims_per_job})")
        job = service.store.create(checkpoint, items, text)
        service.worker.submit(job)
        return {"job_id": job.id, "total": job.total,
                "claims": [{"index": i.index, "id": i.id, "claim": i.claim, "start": i.start, "end": i.end}
                           for i in items]}

    def job_or_404(job_id: str):
        job = service.store.get(job_id)
        if job is None:
            raise HTTPException(404, f"no job {job_id!r} (unknown, or dropped after serve.max_jobs finished jobs)")
        return job

    @app.get("/healthz")
    def healthz() -> dict:
        """Liveness, the checkpoint names, and the batching counters (no token needed)."""
        return {"status": "ok", "checkpoints": service.checkpoints, "queued": service.worker.queued,
                "batches": len(service.worker.batches), "jobs": len(service.store.jobs),
                "auth": service.token is not None}

    @app.get("/v1/info", dependencies=[Depends(authorize)])
    def info() -> dict:
        """The models behind each checkpoint, whether each is calibrated, and the limits in force."""
        return service.info | {"limits": {k: getattr(params, k) for k in (
            "max_claim_chars", "max_text_chars", "max_claims_per_job", "max_body_bytes", "batch_size",
            "max_wait_ms", "max_gather_ms")}, "provenance": service.provenance}

    # the bodies are read by hand (size-limited before parsing); their schemas are declared for /docs
    verify_body = {"requestBody": {"required": True, "content": {
        "application/json": {"schema": VerifyRequest.model_json_schema()}}}}
    batch_body = {"requestBody": {"required": True, "content": {
        "application/x-ndjson": {"schema": {"type": "string", "example": '{"id": "c1", "claim": "..."}\n'}}}}}

    @app.post("/v1/verify", dependencies=[Depends(authorize)], openapi_extra=verify_body)
    async def verify(request: Request) -> dict:
        """Verify one claim (``claim``) or every claim of a text (``text``); answers a job id."""
        try:
            body = VerifyRequest.model_validate_json(await limited_body(request))
        except ValueError as err:
            raise HTTPException(422, f"body: {err}") from None
        if (body.claim is None) == (body.text is None):
            raise HTTPException(422, "body: give exactly one of 'claim' and 'text'")
        checkpoint = checkpoint_of(body.checkpoint)
        if body.claim is not None:
            claim = body.claim.strip()
            if not claim:
                raise HTTPException(422, "claim: empty claim")
            if len(claim) > params.max_claim_chars:
                raise HTTPException(413, f"claim: {len(claim)} characters exceed serve.max_claim_chars "
                                         f"({params.max_claim_chars})")
            return start_job(checkpoint, [ClaimItem(0, body.id or "0", claim)])
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
        return start_job(checkpoint, items, text)

    @app.post("/v1/verify/batch", dependencies=[Depends(authorize)], openapi_extra=batch_body)
    async def verify_batch(request: Request, checkpoint: str | None = Query(None)) -> dict:
        """Verify a JSONL body of claims, one ``{"id": ..., "claim": ...}`` object per line."""
        body = await limited_body(request)
        items = parse_batch(body, params.max_claim_chars)
        if not items:
            raise HTTPException(422, "body: no claim lines (send JSONL: one {\"id\", \"claim\"} object per line)")
        return start_job(checkpoint_of(checkpoint), items)

    @app.get("/v1/jobs/{job_id}", dependencies=[Depends(authorize)])
    def job(job_id: str) -> dict:
        """Progress (``done`` of ``total``) and the results finished so far, in claim order."""
        return job_or_404(job_id).snapshot()

    @app.get("/v1/jobs/{job_id}/results.jsonl", dependencies=[Depends(authorize)])
    async def results(job_id: str) -> StreamingResponse:
        """Every result as one JSON line, sent as it finishes; the stream ends with the job."""
        job = job_or_404(job_id)

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

    @app.post("/v1/corrections", dependencies=[Depends(authorize)])
    def correct(body: CorrectionRequest) -> dict:
        """Store a reviewer's decision on a finished result, with its provenance."""
        job = job_or_404(body.job_id)
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
        try:
            stored = service.corrections.add(Correction(
                reviewer=body.reviewer, claim=result["claim"], original_verdict=result.get("verdict"),
                corrected_verdict=body.corrected_verdict, passage_id=body.passage_id, quote=quote,
                job_id=job.id, note=body.note, checkpoint=job.checkpoint, **service.provenance[job.checkpoint]))
        except ValueError as err:
            raise HTTPException(422, str(err)) from None
        return vars(stored) | {"accepted": stored.accepted}

    @app.get("/v1/corrections", dependencies=[Depends(authorize)])
    def corrections() -> list[dict]:
        """Every stored correction, oldest first."""
        return [vars(c) | {"accepted": c.accepted} for c in service.corrections.all()]

    @app.get("/v1/corrections/export", dependencies=[Depends(authorize)])
    def export(format: str = Query("parquet", pattern="^(parquet|jsonl)$")) -> FileResponse:
        """The corrections as a claim file (CLAIMS schema) for ``prepare``: Parquet or JSONL."""
        out = Path(tempfile.mkdtemp(prefix="factrl-corrections-")) / f"corrections.{format}"
        export_claims(service.corrections.all(), out)
        return FileResponse(out, filename=out.name)

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def parse_batch(body: bytes, max_claim_chars: int) -> list[ClaimItem]:
    """The claims of a JSONL batch body; a line that is not a claim is a 422 naming it (1-based) and
    the field; ids default to the line number and must be unique."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise HTTPException(422, f"body: invalid UTF-8 at byte {err.start}") from None
    items, ids = [], {}
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
# factrl serve
# --------------------------------------------------------------------------------------------


def build_service(params: ServeParams, params_file: str | Path = "params.yaml", *, token: str | None = None,
                  load_llm=None) -> Service:
    """The real service: the checkpoints of ``params`` loaded, the index opened, the worker started."""
    from factrl.hardware import resolve_device
    from factrl.llm.backends import load_llm as open_llm
    from factrl.retrieval.index import MANIFEST, Retriever
    from factrl.service.confidence import Calibration
    from factrl.service.engine import load_verifiers
    from factrl.service.params import index_hash, model_hash, params_hash, resolve_checkpoints
    from factrl.service.usage import price_of

    if not (Path(params.index) / MANIFEST).is_file():
        raise ServeError(f"{params_file}: serve.index: {params.index} holds no finished index "
                         "(run `dvc repro index`, or point serve.index at one)")
    checkpoints = resolve_checkpoints(params, params_file)
    for c in checkpoints:
        for model in (c.reason, c.search):
            if price_of(model, params.prices) is None:
                log.warning("serve: no price for %s in serve.prices: its cost is reported as null", model)
    device = resolve_device(params.device, key="serve.device")
    if load_llm is None:
        from factrl.llm.cache import DiskCache

        disk_cache = DiskCache()  # an endpoint's answers: a claim asked again (or a rerun job) pays nothing

        def load_llm(spec: str):
            return open_llm(spec, device=device, precision=params.precision, disk_cache=disk_cache)
    retriever = Retriever(params.index, mode=params.retrieval_mode)
    verifiers = load_verifiers(checkpoints, retriever, load_llm=load_llm, top_k=params.top_k,
                               max_turns=params.max_turns, max_new_tokens=params.max_new_tokens, prices=params.prices)
    index_digest, params_digest = index_hash(params.index), params_hash(params)
    provenance = {c.name: {"checkpoint_hash": f"{model_hash(c.reason)}+{model_hash(c.search)}",
                           "index_hash": index_digest, "params_hash": params_digest} for c in checkpoints}
    calibrations = {c.name: Calibration.load(params.calibration_dir, c.name) for c in checkpoints}
    store = JobStore(params.max_jobs)
    worker = BatchWorker(verifiers, store, batch_size=params.batch_size, max_wait_s=params.max_wait_ms / 1000,
                         max_gather_s=params.max_gather_ms / 1000, calibrations=calibrations).start()
    info = {"models": {c.name: {"reason": c.reason, "search": c.search} for c in checkpoints},
            "calibrated": {name: cal.calibrated for name, cal in calibrations.items()}}
    return Service(params, worker, store, CorrectionStore(params.corrections_db), provenance, token, info)


def cli_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="factrl serve",
        description="Serve the verifier over HTTP (params section `serve`): POST /v1/verify, /v1/verify/batch, "
                    "GET /v1/jobs/{id}, corrections; the web page at /, OpenAPI at /docs.")
    parser.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
    parser.add_argument("--host", default=None, help="bind address (default serve.host, 127.0.0.1); any other "
                                                      "address needs the token variable serve.token_env set")
    parser.add_argument("--port", type=int, default=None, help="port (default serve.port)")
    parser.add_argument("--export-corrections", metavar="OUT", default=None,
                        help="write the corrections database as a claim file (.parquet or .jsonl) and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``factrl serve``: load the checkpoints and the index of params ``serve`` and serve them."""
    import dataclasses

    args = cli_parser().parse_args(argv)
    from factrl.service.params import load_serve_params

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    params = load_serve_params(args.params)
    params = dataclasses.replace(params, **{k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None})
    if args.export_corrections:
        if not Path(params.corrections_db).is_file():
            raise SystemExit(f"factrl serve: no corrections database at {params.corrections_db} (serve.corrections_db)")
        store = CorrectionStore(params.corrections_db)
        print(export_claims(store.all(), args.export_corrections))
        return 0
    import uvicorn

    try:
        token = bearer_token(params.host, params.token_env)
        service = build_service(params, args.params, token=token)
    except ServeError as err:
        raise SystemExit(str(err)) from None
    log.info("factrl serve: http://%s:%d/ (checkpoints %s; token %s)", params.host, params.port,
             service.checkpoints, "required" if token else "not required on loopback")
    try:
        uvicorn.run(create_app(service), host=params.host, port=params.port, log_level="info")
    finally:
        service.worker.stop()
    return 0
