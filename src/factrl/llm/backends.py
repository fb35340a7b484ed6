"""Open an LLM by backend name: ``local`` (in-process), ``server`` (factrl's own OpenAI-compatible
server started for the block) or ``openai`` (any OpenAI-compatible endpoint: OpenAI, vLLM).

Stages pick the backend from params (the teacher, the served search agent) and use the returned
object through the one ``LLM`` protocol, so the code path is the same at every scale.

Wherever a model is named by one string (an agent, a baseline, a judge: ``--reason-model``,
``evaluate.checkpoints``, ``evaluate.base_model``), that string is an *LLM spec* (:func:`parse_spec`):

    smollm2-135m | models/reason_1 | Qwen/Qwen3-4B     in-process (embedded name, directory, hub id)
    openai:gpt-4o-mini                                 OpenAI's API (key from OPENAI_API_KEY)
    openai:models/reason_1@http://host:8000/v1         any OpenAI-compatible endpoint (vllm serve,
                                                       factrl serve-llm, factrl serve-agent)

An endpoint serving a model whose tokenizer factrl can load (the served name is a checkpoint
directory or an embedded name, as ``factrl serve-agent`` names it) is driven token by token
(``/v1/completions`` with token ids), so its rollouts match the in-process engine's; any other
endpoint runs chats.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BACKENDS = ("local", "inprocess", "server", "openai")  # inprocess: another name for local
OPENAI_PREFIX = "openai:"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LLMSpec:
    """A parsed LLM spec: ``backend`` ``local`` or ``openai``, the ``model`` name, and the
    endpoint's ``base_url`` (empty = OpenAI's own API)."""

    backend: str
    model: str
    base_url: str = ""

    def __str__(self) -> str:
        if self.backend == "local":
            return self.model
        return OPENAI_PREFIX + self.model + (f"@{self.base_url}" if self.base_url else "")


def parse_spec(spec: str) -> LLMSpec:
    """``NAME_OR_PATH`` | ``openai:MODEL`` | ``openai:MODEL@BASE_URL`` (see the module docstring)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty LLM spec {spec!r}")
    if not spec.startswith(OPENAI_PREFIX):
        return LLMSpec("local", spec)
    model, _, base_url = spec[len(OPENAI_PREFIX):].partition("@")
    if not model:
        raise ValueError(f"LLM spec {spec!r} names no model (openai:MODEL[@BASE_URL])")
    if base_url and not base_url.startswith(("http://", "https://")):
        raise ValueError(f"LLM spec {spec!r}: the endpoint must be an http(s) URL, got {base_url!r}")
    return LLMSpec("openai", model, base_url)


def endpoint_spec(model: str, base_url: str = "") -> str:
    """The spec of ``model`` behind an OpenAI-compatible endpoint (``openai:MODEL@BASE_URL``)."""
    return str(LLMSpec("openai", model, base_url))


def route(spec: str, backend: str = "local", base_url: str = "", model: str | None = None) -> str:
    """Where a command-line model runs: ``spec`` itself with ``backend`` ``local`` (or when it is
    already an ``openai:`` spec), else ``model`` (default: ``spec``) behind the endpoint ``base_url``."""
    if backend == "local" or spec.startswith(OPENAI_PREFIX):
        return spec
    if backend != "openai":
        raise ValueError(f"unknown backend {backend!r}; expected 'local' or 'openai'")
    return endpoint_spec(model or spec, base_url)


def add_endpoint_args(parser) -> None:
    """``--backend local|openai``, ``--base-url``, ``--model``: run every agent and baseline of a
    command on one OpenAI-compatible endpoint (see :func:`route`)."""
    parser.add_argument("--backend", choices=("local", "openai"), default="local",
                        help="local: models run in-process; openai: every agent and baseline is sent to the "
                             "OpenAI-compatible endpoint --base-url (vllm serve, factrl serve-llm, OpenAI). "
                             "Per-agent endpoints: give LLM specs openai:MODEL@URL as the model arguments")
    parser.add_argument("--base-url", default="", help="endpoint of --backend openai (default: OpenAI's API)")
    parser.add_argument("--model", default=None,
                        help="the served model's name for --backend openai (default: each model argument)")


def routed(args, spec: str) -> str:
    """``spec`` routed by the arguments of :func:`add_endpoint_args`."""
    return route(spec, args.backend, args.base_url, args.model)


def served_tokenizer(model: str):
    """The tokenizer of a served model when factrl can load it offline (an embedded name or a local
    checkpoint directory, as ``factrl serve-agent`` names what it serves), else None (a hub id or
    an API model: only the server knows it)."""
    from factrl.llm.models import EMBEDDED_MODELS, resolve_model_path

    if model not in EMBEDDED_MODELS and not Path(model).expanduser().is_dir():
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_path(model))


def load_llm(spec: str, *, precision: str = "auto", device: str = "auto", concurrency: int = 64,
             api_key_env: str = "OPENAI_API_KEY", timeout: float = 300.0, disk_cache=None):
    """The LLM an LLM spec names: a :class:`~factrl.llm.local.LocalLLM` (``precision`` and ``device``
    apply to it), or an
    :class:`~factrl.llm.openai_compat.OpenAICompatLLM` (token-level when the served model's tokenizer
    loads, see :func:`served_tokenizer`). With ``disk_cache`` (a :class:`~factrl.llm.cache.DiskCache`)
    an endpoint's reproducible calls go through it, so a rerun pays for none of them again; a local
    model costs nothing per call and is never cached."""
    parsed = parse_spec(spec)
    if parsed.backend == "local":
        from factrl.llm.local import LocalLLM

        return LocalLLM(parsed.model, precision=precision, device=device)
    from factrl.llm.openai_compat import OpenAICompatLLM

    tokenizer = served_tokenizer(parsed.model) if parsed.base_url else None
    log.info("LLM %s: %s", spec, "token-level (/v1/completions)" if tokenizer is not None else "chat only")
    llm = OpenAICompatLLM(parsed.model, base_url=parsed.base_url or None, api_key_env=api_key_env,
                          concurrency=concurrency, timeout=timeout, tokenizer=tokenizer)
    if disk_cache is None:
        return llm
    from factrl.llm.cache import CachedLLM, endpoint_cache_name

    return CachedLLM(llm, disk_cache, key_name=endpoint_cache_name(parsed.model, parsed.base_url))


@contextlib.contextmanager
def open_llm(model: str, backend: str, *, precision: str = "auto", device: str = "auto", concurrency: int = 64,
             base_url: str = "", api_key_env: str = "OPENAI_API_KEY",
             price_per_mtok: tuple[float, float] = (0.0, 0.0), timeout: float = 300.0) -> Iterator[Any]:
    """``model`` behind ``backend``; a spawned server stops when the block ends.

    precision and device apply to the local model (local/server); concurrency caps requests in flight (HTTP
    backends); base_url, api_key_env and price_per_mtok configure the ``openai`` backend, whose
    key is read from the environment by the client and never stored or logged here. ``model`` may
    also be an ``openai:MODEL[@BASE_URL]`` spec (:func:`parse_spec`), which names the backend itself.
    """
    spec = parse_spec(model)
    if spec.backend == "openai":
        model, backend, base_url = spec.model, "openai", spec.base_url or base_url
    if backend in ("local", "inprocess"):
        from factrl.llm.local import LocalLLM

        yield LocalLLM(model, precision=precision, device=device)
        return
    from factrl.llm.openai_compat import OpenAICompatLLM

    if backend == "server":
        from factrl.llm.serve import spawn_server

        with spawn_server(model, precision=precision, device=device, timeout=timeout) as url:
            # the local server checks no key, but the openai client insists on a non-empty one
            yield OpenAICompatLLM(model, base_url=url, api_key="local", concurrency=concurrency,
                                  tokenizer=served_tokenizer(model))
        return
    if backend == "openai":
        yield OpenAICompatLLM(model, base_url=base_url or None, api_key_env=api_key_env,
                              concurrency=concurrency, price_per_mtok=tuple(price_per_mtok),
                              tokenizer=served_tokenizer(model) if base_url else None)
        return
    raise ValueError(f"unknown LLM backend {backend!r}; choose one of {', '.join(BACKENDS)}")
