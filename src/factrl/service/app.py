"""The FastAPI app of ``factrl serve``, its bearer token, and ``main``.

Endpoints (OpenAPI at ``/docs``), grouped in the routers of :mod:`factrl.service.routes`:

* ``POST /v1/verify`` ``{"claim": ...}`` or ``{"text": ...}`` (split into claims first), optional
  ``checkpoint``: -> ``{"job_id", "claims"}``;
* ``POST /v1/verify/batch?checkpoint=NAME``: a JSONL body, one ``{"id", "claim"}`` per line -> the same;
* ``GET /v1/info``: the models, calibration, limits and provenance of each checkpoint;
* ``GET /v1/jobs/{id}``: progress (claims done / total) and the results finished so far;
* ``GET /v1/jobs/{id}/results.jsonl``: the results as JSONL, streamed as they finish;
* ``POST /v1/corrections``, ``GET /v1/corrections``, ``GET /v1/corrections/export?format=parquet|jsonl``;
* ``GET /healthz``; ``GET /``: the web page (static HTML and vanilla JS, ``static/``).

Bad input is a 4xx naming what is wrong: 413 for a body, claim or text over the limits of params
``serve`` (a body is counted as it streams in and refused at the first byte over), 422 for an empty
claim, an unknown checkpoint or a batch line that is no claim (its line number and field), 404 for an
unknown job. A job the claim queue cannot take (``serve.max_queued_claims``) is a 503 with
``Retry-After``. Bound to anything but loopback, every ``/v1`` call needs ``Authorization: Bearer
<token>``, the token read from the environment variable ``serve.token_env``; without it the service
refuses to start.
"""

import argparse
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles

from factrl.agents.abstain import AbstainParams, load_abstain_params
from factrl.servers import UnsafeBind, bearer_dependency, required_token
from factrl.service import routes
from factrl.service.corrections import CorrectionStore, export_claims
from factrl.service.params import ServeParams
from factrl.service.state import Service, start_service

log = logging.getLogger(__name__)


class ServeError(RuntimeError):
    """The service cannot start as configured (a clear message for the command line)."""


def bearer_token(host: str, token_env: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The token requests must carry (:func:`factrl.servers.required_token`): None on loopback;
    elsewhere the value of ``token_env``, and a :class:`ServeError` when it is unset or empty."""
    try:
        return required_token(host, token_env, "factrl serve", environ)
    except UnsafeBind as err:
        raise ServeError(f"{err} (params serve.token_env names the variable)") from None


def create_app(service: Service) -> FastAPI:
    """The app over ``service``: the public routers as they are, the ``/v1`` ones behind its token
    (see the module docstring), the page's static files."""
    app = FastAPI(title="factrl verifier", version="1",
                  description="Verify claims or texts with HARIS over the index: verdicts, calibrated "
                              "confidence, citations, traces and cost; reviewers' corrections.")
    app.state.service = service  # what every route reaches through routes.service_of
    for router in routes.PUBLIC:
        app.include_router(router)
    authorize = Depends(bearer_dependency(service.token))
    for router in routes.AUTHORIZED:
        app.include_router(router, dependencies=[authorize])
    app.mount("/static", StaticFiles(directory=routes.STATIC), name="static")
    return app


# --------------------------------------------------------------------------------------------
# factrl serve
# --------------------------------------------------------------------------------------------


def build_service(params: ServeParams, params_file: str | Path = "params.yaml", *, token: str | None = None,
                  load_llm=None, abstain: AbstainParams | None = None) -> Service:
    """The real service: the checkpoints of ``params`` loaded, the index opened, the worker started.
    ``params_file`` only words errors and resolves checkpoint names; ``abstain`` is its own section."""
    from factrl.hardware import resolve_device
    from factrl.llm.backends import load_llm as open_llm
    from factrl.retrieval.index import MANIFEST, Retriever
    from factrl.service.confidence import Calibration
    from factrl.service.engine import load_verifiers
    from factrl.service.examples import corpus_examples
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
    calibrations = {c.name: Calibration.load(params.calibration_dir, c.name) for c in checkpoints}
    verifiers = load_verifiers(checkpoints, retriever, load_llm=load_llm, top_k=params.top_k,
                               max_turns=params.max_turns, max_new_tokens=params.max_new_tokens, prices=params.prices,
                               abstain=abstain or AbstainParams(), calibrations=calibrations)
    index_digest, params_digest = index_hash(params.index), params_hash(params)
    provenance = {c.name: {"checkpoint_hash": f"{model_hash(c.reason)}+{model_hash(c.search)}",
                           "index_hash": index_digest, "params_hash": params_digest} for c in checkpoints}
    info = {"models": {c.name: {"reason": c.reason, "search": c.search} for c in checkpoints},
            "calibrated": {name: cal.calibrated for name, cal in calibrations.items()},
            **corpus_examples(params.index)}  # the page's examples: claims the served corpus answers
    return start_service(params, verifiers, provenance, token=token, calibrations=calibrations, info=info)


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
        service = build_service(params, args.params, token=token, abstain=load_abstain_params(args.params))
    except ServeError as err:
        raise SystemExit(str(err)) from None
    log.info("factrl serve: http://%s:%d/ (checkpoints %s; token %s)", params.host, params.port,
             service.checkpoints, "required" if token else "not required on loopback")
    try:
        uvicorn.run(create_app(service), host=params.host, port=params.port, log_level="info")
    finally:
        service.worker.stop()
    return 0
