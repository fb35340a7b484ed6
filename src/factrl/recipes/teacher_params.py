"""The teacher LLM's parameters (:class:`TeacherParams`), nested in ``synthesize.teacher`` (HARIS A.4's
pseudo-labels) and ``warmup.teacher`` (reference trajectories); opened by
``factrl.recipes.teacher.open_teacher``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from factrl.config import Device


@dataclass(frozen=True)
class TeacherParams:
    """The teacher LLM that answers the sampled questions from gold evidence.

    backend: ``server`` (factrl's own OpenAI-compatible server, started inside the stage on a free
        loopback port, so the HTTP path is the one exercised), ``local`` (in-process LocalLLM),
        ``openai`` (any OpenAI-compatible endpoint: OpenAI, vLLM; key from ``api_key_env``) or
        ``world`` (no LLM: the answer is read off the claim's gold chain of demo-world facts,
        ``factrl.data.world_teacher``; demo-world claims only; the other fields are unused).
    model: model name: an embedded name or HF directory for local/server, the API model otherwise;
        an ``openai:MODEL@URL`` spec names its endpoint itself, whatever ``backend`` says.
    base_url: endpoint of the ``openai`` backend (empty = OpenAI's default URL).
    api_key_env: environment variable holding the API key (never written anywhere).
    max_tokens: generation budget of one teacher answer.
    price_per_mtok: USD per 1M (prompt, completion) tokens, for the cost report.
    precision: weights of the local model (local/server backends): ``auto`` (bf16 only where the
        hardware computes it natively), ``bf16`` (fp32 attention) or ``fp32``.
    device: where the local model runs (local/server backends): ``auto``, ``cpu``, ``cuda[:n]``.
    """

    backend: Literal["server", "local", "openai", "world"] = "server"
    model: str = "smollm2-135m"
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    max_tokens: int = 160
    price_per_mtok: tuple[float, float] = (0.0, 0.0)
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    device: Device = "auto"
