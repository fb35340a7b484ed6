"""Test helpers for real servers on loopback: a free port, and uvicorn in a background thread."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from factrl.servers import free_port


@contextlib.contextmanager
def running_app(app, timeout: float = 30) -> Iterator[str]:
    """Serve an ASGI ``app`` with uvicorn on a free loopback port; yield ``http://127.0.0.1:PORT``."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
