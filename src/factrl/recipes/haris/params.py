"""HARIS's round stages' parameters: ``synthesize`` (pseudo-labels for the search agent,
``factrl.recipes.haris.synthesize``) and ``train`` (the GRPO of each agent in a round,
``factrl.recipes.haris.train`` / ``haris_rounds``, locally or on verl)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from factrl.config import Device, params_section
from factrl.recipes.teacher_params import TeacherParams
from factrl.rl.params import AgentTrainParams, VerlParams


@dataclass(frozen=True)
class SearchTrainParams(AgentTrainParams):
    """Stage ``train_search@r``: GRPO of the search agent L on qa_r (L_prev -> L_r), reward
    ``haris_search`` (1 useful report / 0.1 valid format / 0 invalid).

    judge: the usefulness judge: ``rule`` (token F1 / containment against the pseudo answer; no
        model) or ``llm`` (the paper's LLM-as-a-judge, run by ``judge_model`` in-process).
    judge_threshold: the rule judge's F1 / containment threshold for "useful".
    judge_model: model of the ``llm`` judge (an embedded name or HF directory).
    """

    judge: Literal["rule", "llm"] = "rule"
    judge_threshold: float = 0.8
    judge_model: str = "smollm2-135m"


@dataclass(frozen=True)
class ReasonTrainParams(AgentTrainParams):
    """Stage ``train_reason@r``: GRPO of the reasoning agent H on the round's claims (H_prev -> H_r),
    with the just-trained search agent L_r answering its questions; reward ``haris_reasoning``
    (1 right verdict / 0.1 wrong verdict, valid format / 0 invalid).

    search_backend: how L_r serves: ``inprocess`` (a LocalLLM beside the policy) or ``server``
        (``factrl serve-llm`` on a loopback port, reached over the OpenAI-compatible HTTP API, as
        the paper serves it with vLLM).
    search_max_turns: searches L_r may run per question.
    search_max_new_tokens: tokens L_r generates per turn.
    search_temperature: L_r's sampling temperature (0 = greedy: the environment stays stable
        while H learns).
    require_question: "ask before you decide" (not in the paper; an ablation): ``true``, a verdict
        with no question on a multi-hop claim counts as an invalid format (reward 0); ``per_hop``,
        one with fewer than hops - 1 questions (one per bridge entity) does.
    reward: a ``claim_verdict`` reward of the haris or maporl family (``factrl.rewards.registry``):
        ``haris_reasoning`` (R_high, the paper's eq. 1) or ``maporl_reasoning`` (MAPoRL's rule
        verifier behind its reward-hacking guards: no box, text after the box, fewer than 50 tokens,
        a phrase repeated 4+ times in a row each score -10).
    hop_reward: per-hop shaping, StepSearch-style dense credit (not in HARIS; 0 = off): a valid-format
        response also earns this times the share of the claim's gold hop answers that the reports it
        read name (``rewards.haris.with_hop_credit``), so groups whose verdicts agree still rank the
        rollouts that got further along the chain. Claims without hops (real data) earn none.
    gate_claims: before training, the round's starting pair answers this many of its claims
        (balanced by label and hops) ``group_size`` times each at the training temperature, and the
        stage writes the gate figures (``factrl.rl.gate``: pass@1, pass@``group_size``, the share of
        all-equal groups, per hop) to ``metrics/gate/reason_r<id>.json``: whether GRPO has groups
        that mix to learn from. 0 = no gate.
    gate_samples: rollouts per gate claim when more than ``group_size`` (0 = ``group_size``): the gate
        then reports pass@``gate_samples`` too, and the all-equal rate of a random group of
        ``group_size`` of them (what the round's groups see), both unbiased.
    """

    search_backend: Literal["inprocess", "server"] = "inprocess"
    search_max_turns: int = 2
    search_max_new_tokens: int = 128
    search_temperature: float = 0.0
    require_question: bool | Literal["per_hop"] = False
    reward: str = "haris_reasoning"
    hop_reward: float = 0.0
    gate_claims: int = 0
    gate_samples: int = 0


@params_section("train")
@dataclass(frozen=True)
class TrainParams:
    """The ``train`` section: one sub-section per agent, so each stage depends on its own keys only
    (train_search@r on ``train.search``, train_reason@r on ``train.reasoning``), plus the backend
    both stages run on.

    search: the search agent's GRPO (see :class:`SearchTrainParams`).
    reasoning: the reasoning agent's GRPO (see :class:`ReasonTrainParams`).
    backend: ``local`` (factrl's own GRPO trainer, in-process; CPU or one GPU) or ``verl`` (verl's
        ``main_ppo`` on a Ray GPU cluster, configured by ``verl``), fed the same rows, prompts,
        tools and rewards; both write the same Hugging Face model.
    verl: the cluster settings of the ``verl`` backend (see :class:`VerlParams`).
    """

    search: SearchTrainParams = field(default_factory=SearchTrainParams)
    reasoning: ReasonTrainParams = field(default_factory=ReasonTrainParams)
    backend: Literal["local", "verl"] = "local"
    verl: VerlParams = field(default_factory=VerlParams)


@params_section("synthesize")
@dataclass(frozen=True)
class SynthesizeParams:
    """Stage ``synthesize@r``: rollouts -> one question per claim -> teacher answer -> qa_r.parquet.

    teacher: the teacher LLM (see :class:`TeacherParams`).
    retrieval_mode: how the search agent retrieves during the rollouts (``index/``).
    batch_size: questions per Prefect task (one teacher batch, one checkpoint file).
    concurrency: teacher batches in flight at once.
    retries: Prefect retries of a batch on I/O errors (connection, timeout); other errors fail it.
    signature_retries: re-asks of the teacher for an answer it did not format correctly.
    max_claims: use at most this many claims of the round's segment (0 = all), for small profiles.
    rollout_max_tokens: generation budget of each reasoning-agent rollout.
    rollout_temperature: sampling temperature of the rollouts (seeded, so reruns are identical).
    seed: seed of the rollouts and of the question sampling.
    device: where the rollout models (the round's reasoning and search agents) run: ``auto``,
        ``cpu``, ``cuda[:n]`` (the teacher has its own, ``teacher.device``).
    reason_endpoint: an OpenAI-compatible base URL serving H_prev (``factrl serve-agent
        models/reason_<prev>``, i.e. ``vllm serve``); empty = in-process.
    search_endpoint: the same for L_prev (``models/search_<prev>``); empty = in-process.
    """

    teacher: TeacherParams = field(default_factory=TeacherParams)
    retrieval_mode: Literal["bm25", "dense", "hybrid"] = "hybrid"
    batch_size: int = 8
    concurrency: int = 4
    retries: int = 2
    signature_retries: int = 2
    max_claims: int = 0
    rollout_max_tokens: int = 256
    rollout_temperature: float = 1.0
    seed: int = 17
    device: Device = "auto"
    reason_endpoint: str = ""
    search_endpoint: str = ""
