"""M2R's parameters: ``m2r`` (the agent's GRPO and warm start, ``factrl.recipes.m2r``) and
``m2r_stages`` (the curriculum stages, one DVC stage ``train_m2r@<id>`` each)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from factrl.config import params_section
from factrl.rl.params import AgentTrainParams, SFTParams


@dataclass(frozen=True)
class M2RStageParams:
    """One M2R training stage (an entry of ``m2r_stages``; DVC stage ``train_m2r@<id>``).

    id: the stage's key in ``m2r_stages``; it names the stage's DVC stage and files
        (``m2r/model_<id>``, ``metrics/m2r/train_r<id>.json``).
    prev: the stage whose model this one starts from (0 = ``m2r.base_model``, warm-started first
        when ``m2r.warm_start``).
    segment: the training questions: a curriculum piece ``segments/<segment>.parquet``
        (``m2r_stage1`` and ``m2r_stage2``: the halves of ``curriculum.m2r_split``, ``all``: the one-stage
        ablation), each claim's gold chain turned into one multi-hop question.
    format: what the reward counts as a valid format (paper section 3.4): 1 = macro retrieval, a
        valid key save and a boxed answer; 2 = also micro retrieval in the answer.
    start: the file the stage's starting point is made from, for dvc.yaml's deps (DVC templates
        cannot branch on ``prev``): ``segments/all.parquet`` (the warm start's references) when
        ``prev`` is 0, else ``m2r/model_<prev>``; checked against ``prev`` when the stage runs.
    """

    id: int
    prev: int
    segment: str
    format: Literal[1, 2] = 2
    start: str = "segments/all.parquet"

    def expected_start(self) -> str:
        return "segments/all.parquet" if self.prev == 0 else f"m2r/model_{self.prev}"


@params_section("m2r_stages")
@dataclass(frozen=True)
class M2RStagesParams:
    """The ``m2r_stages`` mapping of params.yaml: stage id -> that stage's settings. Empty (the
    default) = no ``train_m2r`` stage in the pipeline: M2R training is off.

    stages: the stages in id order; each starts from stage 0 or an earlier one.
    """

    MAP_FIELD = "stages"
    stages: tuple[M2RStageParams, ...] = ()


@params_section("m2r")
@dataclass(frozen=True)
class M2RParams(AgentTrainParams):
    """Stage ``train_m2r@<id>``: GRPO of the M2R agent (``factrl.agents.m2r``) on one curriculum
    stage's multi-hop questions, with the rule-based reward of the paper (eq. 5-6). Every
    :class:`AgentTrainParams` field, flat (``dvc exp run -S m2r.lr=2e-6``), plus:

    base_model: the model stage 0 is: ``base`` (params ``model.base``) or a model (an embedded name,
        HF directory or hub id); resolved by :func:`resolve_model`.
    reward: an ``answer`` reward of the m2r family (``factrl.rewards.registry``; ``m2r``): called with
        the final answer, the gold answers, the format validity, the saved key values, ``alpha`` and ``beta``.
    alpha: weight of the key-information score s_key in r_ans (the paper's 1/3).
    beta: weight of the consistency score s_cons in r_ans (the paper's 1/10).
    warm_start: fine-tune the base model on reference M2R trajectories of the demo world's gold
        chains before stage 1 (the ``warmup`` mechanism: ``factrl.recipes.warmup``); a 135M model
        does not find the protocol from GRPO's sparse reward alone.
    warm_prompt: the system prompt the warm-started agent is trained with and keeps (``short`` or
        ``full``; the base model without warm start always gets ``full``).
    warm_max_items: training questions the references are built from (0 = all of the segment's).
    warm_max_length: prompt + response tokens of one reference example (longer ones are left out).
    sft: the warm start's fine-tuning (see :class:`SFTParams`).
    """

    base_model: str = "base"
    reward: str = "m2r"
    alpha: float = 1 / 3
    beta: float = 0.1
    warm_start: bool = True
    warm_prompt: Literal["full", "short"] = "short"
    warm_max_items: int = 0
    warm_max_length: int = 1024
    sft: SFTParams = field(default_factory=SFTParams)
