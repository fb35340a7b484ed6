"""Servers: the bind rule every factrl server follows, and the servers a run starts for itself.

The bind rule (``factrl serve``, ``serve-llm``, ``serve-retriever``): loopback by default; bound to
any other address a server refuses to start unless a bearer token is set in an environment variable
(:func:`required_token`), and then every request but liveness must carry it
(:func:`bearer_dependency`). The token is read from the environment only, never logged or written.

Servers a run starts for itself: a command in a subprocess, used once it answers, stopped after.

``factrl serve-llm`` for a teacher or a served search agent, ``factrl serve-retriever`` and
``vllm serve`` (through ``factrl serve-agent``) for a verl run: :func:`spawn` starts the command,
polls ``ready_url`` until it answers 200, yields, and terminates the process when the block ends
(also when the run failed), so no server outlives the stage that started it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

LOOPBACK = "127.0.0.1"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class UnsafeBind(RuntimeError):
    """A server asked to listen beyond this machine without a token to check (a clear message for
    the command line)."""


def required_token(host: str, token_env: str, command: str,
                   environ: Mapping[str, str] = os.environ) -> str | None:
    """The bearer token requests to ``command`` bound on ``host`` must carry: None on loopback;
    elsewhere the value of the environment variable ``token_env``, and :class:`UnsafeBind` when it is
    unset or blank (refusing rather than warning: a warning scrolls past in a log, while an open
    model server on a shared network is free compute and, for the verifier, readable claims)."""
    if host in LOOPBACK_HOSTS:
        return None
    token = environ.get(token_env, "")
    if not token.strip():
        raise UnsafeBind(f"{command}: binding {host} exposes the server beyond this machine, so requests must "
                         f"carry a bearer token: set the environment variable {token_env} to a secret, "
                         f"or bind 127.0.0.1")
    return token


def token_matches(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <token>`` (constant-time comparison)."""
    import secrets

    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), token.encode())


def bearer_dependency(token: str | None):
    """A FastAPI dependency that answers 401 unless the request carries ``Bearer <token>``; with
    ``token`` None (loopback) it lets everything through."""
    from fastapi import HTTPException, Request

    def authorize(request: Request) -> None:
        if token is not None and not token_matches(request.headers.get("authorization", ""), token):
            raise HTTPException(401, "missing or wrong bearer token (Authorization: Bearer <token>)",
                                headers={"WWW-Authenticate": "Bearer"})

    # this module's annotations are strings (PEP 563) naming a class imported in this function,
    # which FastAPI could not resolve; the real class makes ``request`` the request, not a query field
    authorize.__annotations__["request"] = Request
    return authorize


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` (declared by ``Content-Length`` or sent
    chunked) is answered 413 with a JSON ``detail`` naming ``setting`` before the app parses it, so
    one oversized request cannot make a single-process server buffer or parse gigabytes."""

    def __init__(self, app, max_bytes: int, setting: str) -> None:
        self.app, self.max_bytes, self.setting = app, max_bytes, setting

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(send, int(declared))
        chunks, size, more = [], 0, True
        while more:  # read the body (bounded) before the app sees it
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                return await self._refuse(send, size)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _refuse(self, send, size: int) -> None:
        import json

        detail = json.dumps({"detail": f"request body of {size}+ bytes exceeds {self.setting} ({self.max_bytes})"})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": detail.encode()})


def answer_invalid_bodies_cleanly(app) -> None:
    """A body that fails validation gets a 422 listing each error's ``loc``, ``type`` and ``msg``,
    without echoing the input back. FastAPI's own handler echoes it, and a non-finite number (JSON's
    ``Infinity`` / ``NaN``, which Python's parser accepts) cannot be encoded in the answer: a
    ``{"topk": Infinity}`` body got a 500 (found by tests/retrieval/test_server_fuzz.py)."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(request, exc: RequestValidationError) -> JSONResponse:
        errors = [{key: error[key] for key in ("loc", "type", "msg") if key in error} for error in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": errors})


def free_port(host: str = LOOPBACK) -> int:
    """A currently free TCP port on ``host``."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def reachable_host(bind_host: str) -> str:
    """The host name clients use for a server bound to ``bind_host`` (this machine's name when it
    listens on every interface)."""
    return socket.getfqdn() if bind_host in ("0.0.0.0", "::", "") else bind_host


@contextlib.contextmanager
def spawn(command: Sequence[str], ready_url: str, *, timeout: float = 300.0, env: Mapping[str, str] | None = None,
          name: str | None = None, log_path: str | Path | None = None) -> Iterator[subprocess.Popen]:
    """Run ``command``; yield the process once ``ready_url`` answers 200; stop it on exit.

    Its output goes to ``log_path`` (appended) or a temporary file, never to a pipe nobody reads
    (a server that logs for hours would block on a full pipe); a failure quotes its last lines.
    """
    name = name or os.path.basename(command[0])
    log = open(log_path, "a+b") if log_path is not None else tempfile.TemporaryFile()  # noqa: SIM115
    proc = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **dict(env or {})})
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {_tail(log)}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(ready_url, timeout=2) as resp:
                    if resp.status == 200:
                        break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not answer {ready_url} within {timeout:.0f}s: {_tail(log)}")
            time.sleep(0.5)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _tail(log, size: int = 2000) -> str:
    log.flush()
    log.seek(max(0, os.fstat(log.fileno()).st_size - size))
    return log.read().decode(errors="replace")
