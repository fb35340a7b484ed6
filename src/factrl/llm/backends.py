"""Open an LLM by backend name: ``local`` (in-process), ``server`` (factrl's own OpenAI-compatible
server started for the block) or ``openai`` (any OpenAI-compatible endpoint: OpenAI, vLLM).

Stages pick the backend from params (the teacher, the served search agent) and use the returned
object through the one ``LLM`` protocol, so the code path is the same at every scale.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from factrl.config import TeacherParams

BACKENDS = ("local", "inprocess", "server", "openai")  # inprocess: another name for local


@contextlib.contextmanager
def open_llm(model: str, backend: str, *, precision: str = "auto", device: str = "auto", concurrency: int = 64,
             base_url: str = "", api_key_env: str = "OPENAI_API_KEY",
             price_per_mtok: tuple[float, float] = (0.0, 0.0), timeout: float = 300.0) -> Iterator[Any]:
    """``model`` behind ``backend``; a spawned server stops when the block ends.

    precision and device apply to the local model (local/server); concurrency caps requests in flight (HTTP
    backends); base_url, api_key_env and price_per_mtok configure the ``openai`` backend, whose
    key is read from the environment by the client and never stored or logged here.
    """
    if backend in ("local", "inprocess"):
        from factrl.llm.local import LocalLLM

        yield LocalLLM(model, precision=precision, device=device)
        return
    from factrl.llm.openai_compat import OpenAICompatLLM

    if backend == "server":
        from factrl.llm.serve import spawn_server

        with spawn_server(model, precision=precision, device=device, timeout=timeout) as url:
            # the local server checks no key, but the openai client insists on a non-empty one
            yield OpenAICompatLLM(model, base_url=url, api_key="local", concurrency=concurrency)
        return
    if backend == "openai":
        yield OpenAICompatLLM(model, base_url=base_url or None, api_key_env=api_key_env,
                              concurrency=concurrency, price_per_mtok=tuple(price_per_mtok))
        return
    raise ValueError(f"unknown LLM backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def open_teacher(params: TeacherParams, concurrency: int = 16):
    """The teacher of ``synthesize`` (a ``config.TeacherParams``) through ``open_llm``; backend
    ``world`` opens no model (``factrl.data.world_teacher.WorldTeacher`` names the teacher, its
    answers come from the gold chain)."""
    if params.backend == "world":
        from factrl.data.world_teacher import WorldTeacher

        return contextlib.nullcontext(WorldTeacher())
    device = params.device
    if params.backend != "openai":  # a local model: check its device here, where the params key is known
        from factrl.hardware import resolve_device

        device = str(resolve_device(params.device, key="synthesize.teacher.device"))
    return open_llm(params.model, params.backend, precision=params.precision, device=device,
                    concurrency=concurrency, base_url=params.base_url, api_key_env=params.api_key_env,
                    price_per_mtok=params.price_per_mtok)
