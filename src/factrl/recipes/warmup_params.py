"""Stage ``warmup``'s parameters: H_0 and L_0, the base model with an optional supervised warm start
(``factrl.recipes.warmup``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from factrl.config import params_section
from factrl.recipes.teacher_params import TeacherParams
from factrl.rl.params import SFTParams


@params_section("warmup")
@dataclass(frozen=True)
class WarmupParams:
    """Stage ``warmup``: H_0 and L_0 (models/reason_0, models/search_0), the agents round 1 starts
    from: the base model, fine-tuned first on reference trajectories of each agent when ``enabled``
    (the CPU demo: a 135M model that has never seen the tag protocol learns it here instead of from
    GRPO's sparse reward; the paper's recipe starts from the base model).

    enabled: run the warm start (false: H_0 = L_0 = ``base_model`` as it is).
    base_model: the model both agents start from: ``base`` (default: params ``model.base``) or a model
        (an embedded name, HF directory or hub id org/name; see :func:`resolve_model`).
    source: where the reference trajectories come from: ``world`` (the demo world's gold chains with
        the real retriever's passages; needs demo-world claims) or ``teacher`` (``teacher`` plays both
        agents on the training claims; kept only when its verdict matches the gold label).
    prompt: the system prompts the warmed agents are trained with and keep using (recorded in their
        checkpoints, read back wherever they run): ``short`` (the tags only; a quarter of the full
        prompt's tokens in every later training step and rollout) or ``full`` (the base model's).
    max_claims: training claims used (0 = all), a balanced subset by label and hops.
    retrieval_mode: how the search references retrieve over ``index/`` (``bm25``, ``dense``, ``hybrid``).
    top_k: passages per search (the agents' top-3).
    max_tool_response_tokens: an injected ``<result>`` longer than this is cut in the middle, as in
        the rollouts (match ``train.*.max_tool_response_tokens``).
    max_length: prompt + response tokens of one example; longer trajectories are left out (counted).
    teacher: the LLM that writes the references when ``source`` is ``teacher`` (GPT-4o at scale);
        its ``max_tokens`` is the budget of each turn it writes.
    teacher_samples: rollouts of the teacher per claim (each kept when its verdict is right).
    teacher_temperature: the teacher's sampling temperature.
    teacher_max_turns: questions the teacher's reasoning agent may ask (and searches per question).
    search_max_turns: searches a world search reference may run (source ``world``): at 2, a question
        whose natural query (names and a key word) misses the gold passage is searched again with the
        subject alone, and the reference shows both searches, so re-querying is a habit the warm
        search agent already has (give the search agent as many turns where it runs).
    precision: ``auto`` (bf16 only where the hardware computes it natively; see ``factrl.hardware``),
        ``bf16`` or ``fp32``.
    seed: seeds the claim subset, data order and everything random in training.
    reasoning: the reasoning agent's fine-tuning (see :class:`SFTParams`).
    search: the search agent's fine-tuning.
    """

    enabled: bool = False
    base_model: str = "base"
    source: Literal["world", "teacher"] = "world"
    prompt: Literal["full", "short"] = "short"
    max_claims: int = 0
    retrieval_mode: Literal["bm25", "dense", "hybrid"] = "hybrid"
    top_k: int = 3
    max_tool_response_tokens: int = 192
    max_length: int = 1024
    teacher: TeacherParams = field(default_factory=lambda: TeacherParams(backend="openai", model="gpt-4o",
                                                                         max_tokens=256))
    teacher_samples: int = 1
    teacher_temperature: float = 0.7
    teacher_max_turns: int = 4
    search_max_turns: int = 1
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    seed: int = 0
    reasoning: SFTParams = field(default_factory=SFTParams)
    search: SFTParams = field(default_factory=SFTParams)
