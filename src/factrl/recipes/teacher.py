"""The teacher of ``synthesize`` and ``warmup`` opened from its params (:class:`TeacherParams`):
the demo world's gold-chain teacher, or an LLM by backend through ``factrl.llm.backends.open_llm``.
Fact-checking knowledge (which teacher answers from the world's gold chain) lives here, on the recipe
side, so ``factrl.llm`` stays a generic LLM layer."""

from __future__ import annotations

import contextlib

from factrl.data.world_teacher import WorldTeacher
from factrl.hardware import resolve_device
from factrl.llm.backends import open_llm
from factrl.recipes.teacher_params import TeacherParams


def open_teacher(params: TeacherParams, concurrency: int = 16):
    """The teacher of ``synthesize`` (a ``factrl.recipes.teacher_params.TeacherParams``) through ``open_llm``; backend
    ``world`` opens no model (``factrl.data.world_teacher.WorldTeacher`` names the teacher, its
    answers come from the gold chain)."""
    if params.backend == "world":
        return contextlib.nullcontext(WorldTeacher())
    device = params.device
    if params.backend != "openai":  # a local model: check its device here, where the params key is known
        device = str(resolve_device(params.device, key="synthesize.teacher.device"))
    return open_llm(params.model, params.backend, precision=params.precision, device=device,
                    concurrency=concurrency, base_url=params.base_url, api_key_env=params.api_key_env,
                    price_per_mtok=params.price_per_mtok)
