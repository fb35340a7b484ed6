"""The ``serve`` section of params.yaml (:class:`ServeParams`), the checkpoints it names, and the
provenance hashes a reviewer's correction is stored with.

Checkpoints are named as in ``evaluate.checkpoints``: symbolic names (``base``, ``warm``, ``last``,
``r<id>``) resolved by :func:`factrl.model_names.resolve_model`, model directories, embedded names, or
OpenAI-compatible endpoints (``openai:MODEL@URL``). The generation limits default to the ``evaluate``
section's, so the service answers a claim the way the evaluation scored it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from factrl.config import PARAMS_FILE, ConfigError, Device, load_section, params_section, to_dict
from factrl.eval.params import CheckpointParams, EvaluateParams

SECTION = "serve"


@params_section(SECTION)
@dataclass(frozen=True)
class ServeParams:
    """``factrl serve``: the verifier over HTTP (``factrl.service.app``).

    host: the address to bind; 127.0.0.1 (default) or localhost serve this machine only. Any other
        address requires a bearer token, read from the environment variable ``token_env``.
    port: the TCP port.
    token_env: the environment variable holding the bearer token (never stored in params or logged).
    checkpoints: the HARIS (reasoning, search) pairs a request may name (``checkpoint``: a ``name``);
        the first is the default. Names as in ``evaluate.checkpoints``; name one like an evaluated
        checkpoint to use its calibration file (``calibration_dir``/<name>.json).
    index: the index directory (the ``index`` stage's output).
    retrieval_mode: how the search agent searches it (``bm25``, ``dense`` or ``hybrid``).
    top_k: passages per search (this and the next two default to the ``evaluate`` section's values).
    max_turns: questions per claim (and searches per question).
    max_new_tokens: tokens per agent turn.
    device / precision: where and in what precision local models run (as ``evaluate``).
    prices: USD per 1M (input, output) tokens by model: a key is an LLM spec as a checkpoint resolves
        to (``openai:gpt-4o-mini``, ``openai:MODEL@URL``) or its bare model name. Local models cost 0;
        an endpoint missing here gets a null cost (unknown), never a guess.
    batch_size: claims run through HARIS in one batched call; the worker closes a batch at this size.
    max_wait_ms: how long a gathering batch waits for the next claim to join (the gap: each claim that
        joins restarts it, so a burst of requests arriving one by one still makes one batch).
    max_gather_ms: the longest a batch gathers after its first claim (at least ``max_wait_ms``).
    max_claim_chars / max_text_chars: the longest claim and text a request may send (413 beyond).
    max_claims_per_job: the most claims one job may hold (a text's claims or a batch file's lines).
    max_body_bytes: the largest request body, counted as it is read (413 beyond).
    max_queued_claims: the most claims waiting for the verifier; a job whose claims would pass it is
        refused whole with a 503 and ``Retry-After`` (the seconds the queue needs to drain enough, at
        the recent rate), so a flood is told to wait instead of growing memory. At least
        ``max_claims_per_job``, or the largest job could never run.
    max_jobs: finished jobs kept in memory; the oldest finished ones are dropped beyond it. Unfinished
        jobs are bounded by ``max_queued_claims`` (each has a claim queued or in the running batch).
    decomposer: the backend splitting a text into claims (``factrl.verify.decompose``): ``sentences``
        or ``llm``.
    decomposer_model: the endpoint the ``llm`` decomposer asks, ``openai:MODEL@URL`` (e.g.
        ``openai:Qwen/Qwen3-4B@http://127.0.0.1:8000/v1`` for vLLM, ``openai:gpt-4o`` for OpenAI's API,
        key from OPENAI_API_KEY); required with ``llm``, unused with ``sentences``.
    calibration_dir: where calibration maps live, one ``<checkpoint name>.json`` each (written by
        ``evaluate``); without one a result's confidence is the raw score, marked uncalibrated.
    corrections_db: the SQLite file of reviewers' corrections.
    """

    host: str = "127.0.0.1"
    port: int = 8090
    token_env: str = "FACTRL_SERVE_TOKEN"
    checkpoints: tuple[CheckpointParams, ...] = (CheckpointParams("HARIS (trained)", "last", "last"),)
    index: str = "index"
    retrieval_mode: Literal["bm25", "dense", "hybrid"] = EvaluateParams.retrieval_mode
    top_k: int = EvaluateParams.top_k
    max_turns: int = EvaluateParams.max_turns
    max_new_tokens: int = EvaluateParams.max_new_tokens
    device: Device = "auto"
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)
    batch_size: int = 16
    max_wait_ms: float = 200.0
    max_gather_ms: float = 2000.0
    max_claim_chars: int = 1000
    max_text_chars: int = 20000
    max_claims_per_job: int = 500
    max_body_bytes: int = 2_000_000
    max_queued_claims: int = 2000
    max_jobs: int = 1000
    decomposer: str = "sentences"
    decomposer_model: str = ""
    calibration_dir: str = "metrics/calibration"
    corrections_db: str = "corrections/corrections.sqlite"

    def __post_init__(self) -> None:
        for name in ("port", "top_k", "max_new_tokens", "batch_size", "max_claim_chars", "max_text_chars",
                     "max_claims_per_job", "max_body_bytes", "max_queued_claims", "max_jobs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"serve.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_queued_claims < self.max_claims_per_job:
            raise ConfigError(f"serve.max_queued_claims ({self.max_queued_claims}) must be >= serve.max_claims_per_job "
                              f"({self.max_claims_per_job}): a job that large could never be queued")
        if self.max_wait_ms < 0 or self.max_gather_ms < 0:
            raise ConfigError(f"serve.max_wait_ms and serve.max_gather_ms must be >= 0, got "
                              f"{self.max_wait_ms} and {self.max_gather_ms}")
        if self.decomposer == "llm" and not self.decomposer_model:
            raise ConfigError("serve.decomposer is 'llm': set serve.decomposer_model to its endpoint, "
                              "openai:MODEL@URL (e.g. openai:Qwen/Qwen3-4B@http://127.0.0.1:8000/v1)")
        if not self.checkpoints:
            raise ConfigError("serve.checkpoints: empty; list at least one {name, reason, search}")
        names = [c.name for c in self.checkpoints]
        if len(set(names)) != len(names):
            raise ConfigError(f"serve.checkpoints: names must be unique, got {names}")
        for model, price in self.prices.items():
            if min(price) < 0:
                raise ConfigError(f"serve.prices.{model}: prices must be >= 0, got {list(price)}")


def load_serve_params(params_file: str | Path = PARAMS_FILE) -> ServeParams:
    """The ``serve`` section of ``params_file`` (defaults for an absent section); errors name the key."""
    return load_section(ServeParams, params_file)


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """A checkpoint of ``serve.checkpoints`` with its models resolved: ``reason`` / ``search`` are LLM
    specs (a directory, an embedded name or ``openai:MODEL@URL``); ``spec`` the names as written."""

    name: str
    reason: str
    search: str
    spec: CheckpointParams


def resolve_checkpoints(params: ServeParams, params_file: str | Path = PARAMS_FILE) -> list[ResolvedCheckpoint]:
    """Every checkpoint of ``params`` resolved (:func:`factrl.model_names.resolve_model`); a local model
    directory that does not exist is a FileNotFoundError naming the params key."""
    from factrl.eval.runner import resolve_checkpoint_pair

    return [ResolvedCheckpoint(c.name, *resolve_checkpoint_pair(c, f"{SECTION}.checkpoints[{i}]", params_file), c)
            for i, c in enumerate(params.checkpoints)]


# --------------------------------------------------------------------------------------------
# provenance hashes (stored with every correction)
# --------------------------------------------------------------------------------------------


def _hash_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.name).encode())
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def model_hash(spec: str) -> str:
    """A content hash of a model: its directory's files (weights, config, tokenizer) for a local
    checkpoint, else the spec itself (an embedded name or an endpoint: what it names is not ours)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return _hash_files([p for p in path.rglob("*") if p.is_file()])
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def index_hash(index_dir: str | Path) -> str:
    """A content hash of an index: its manifest and the passages it serves."""
    index_dir = Path(index_dir)
    return _hash_files([p for p in (index_dir / "manifest.json", index_dir / "passages.parquet") if p.is_file()])


def params_hash(params: ServeParams) -> str:
    """A hash of the ``serve`` section as loaded (defaults filled in)."""
    return hashlib.sha256(json.dumps(to_dict(params), sort_keys=True).encode()).hexdigest()[:16]
