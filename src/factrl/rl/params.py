"""The parameters of factrl's trainers: GRPO (``factrl.rl.trainer``), an agent's GRPO run with its
rollouts (``factrl.rl.runs``), the verl backend's cluster (``factrl.rl.verl_backend``) and supervised
fine-tuning (``factrl.rl.sft``). No section of params.yaml on their own: the train sections
(``train``, ``m2r``, ``train_march``, ``warmup``) nest or extend them.

On the GPU code path: imports the standard library and the loader only (the KL and loss registries, which
name the allowed ``kl_type`` / ``loss_agg``, are imported when params load).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from factrl.config import Device, names_from


def _kl_estimators():
    from factrl.rl.kl import KL_ESTIMATORS  # torch: imported when params load, not with this module

    return KL_ESTIMATORS


def _planted_defects():
    from factrl.rl.defects import PLANTED_DEFECTS

    return {"", *PLANTED_DEFECTS}  # "" plants nothing


def _loss_aggregations():
    from factrl.rl.losses import LOSS_AGGREGATIONS

    return LOSS_AGGREGATIONS


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
    kl_type: KL estimator, a name of ``factrl.rl.kl.KL_ESTIMATORS``: ``k1``/``kl``, ``abs``, ``k2``/``mse``,
        ``k3``/``low_var_kl``; with a trailing ``+`` its straight-through variant (k2's gradient).
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
    keep_final_checkpoint: keep the run's last checkpoint (weights, optimizer, RNG states) in its
        state directory when it ends, so that raising ``steps`` later continues the run instead of
        starting over (``steps`` is not part of a run's fingerprint, ``rl.runs.NOT_FINGERPRINTED``).
        Off by default: it costs the weights plus AdamW's two moments on disk, ~1.6 GB per agent at
        135M parameters and ~48 GB at 4B.
    seed: seeds prompt order, sampling and initialisation of everything random.
    dynamic_sampling: DAPO's dynamic sampling (verl ``algorithm.filter_groups``): groups whose
        rewards are all equal (zero advantages: no signal) are dropped and more prompts are drawn
        until the step has ``prompts_per_step`` groups with signal or ``max_sampling_draws`` is
        reached; the step then trains on the groups kept (no update when none was).
    max_sampling_draws: with dynamic sampling, at most this many draws per step, the first included
        (verl's ``max_num_gen_batches``).
    redraw: how many prompts a later draw of dynamic sampling rolls out: ``full`` (``prompts_per_step``,
        as DAPO and verl draw a whole generation batch) or ``missing`` (only as many as the step still
        lacks groups with signal). A step whose first draw lost one all-equal group of 8 then rolls out
        one more prompt, not eight: on the demo's round a full redraw doubled a step's rollout time
        (89 -> 249 s, 2 AVX2 cores) to replace one group.
    balance_by: a prompt field (e.g. ``label``) whose values every draw holds in proportion (each
        value's prompts spread evenly over the epoch's order); empty = plain shuffled order. A step
        of claims that are all SUPPORTED pushes every group's advantage toward one verdict. On verl
        the rows are written in this order and read unshuffled (``factrl.rl.verl_run.step_rows``).
    chunked_logprobs: the update computes log-probs (and the logged entropy) only at the positions
        that carry loss, ``logprob_chunk`` positions at a time, from the decoder's hidden states,
        keeping no logits (``factrl.rl.losses.token_logprobs_chunked``); off = the model's full
        ``[b, T, V]`` logits, upcast to fp32. Same loss and gradients within fp32 rounding. Models
        whose head is not a plain projection, and an entropy bonus (``entropy_coef > 0``), take the
        full logits either way.
    logprob_chunk: positions projected onto the vocabulary at a time by ``chunked_logprobs``
        (memory about ``2 * logprob_chunk * vocabulary * 4`` bytes: 100 MB at 256 x 49,152).
    group_by_length: order each mini-batch's trajectories by length before cutting it into
        micro-batches, so a micro-batch pads to about its own rows' length (the update's sum is the
        same; only its order of summation changes).
    shared_prefix: forward a group's common prompt once per micro-batch and run its rollouts on the
        prompt's key/values (verl's ``use_prefix_grouper``, arXiv 2506.05433) instead of once per
        rollout; a micro-batch then holds the rollouts of one prompt (up to ``micro_batch_size``).
        Same loss and gradients within fp32 rounding; saves ``(G - 1) / G`` of the prompt's share of
        the update's forward and backward.
    lora_rank: train LoRA adapters of this rank instead of every weight (0 = full fine-tuning;
        :mod:`factrl.rl.lora`, through peft; on verl ``actor_rollout_ref.model.lora_rank``): no weight
        gradients or AdamW moments for the targeted matrices, and the KL reference is the policy with
        its adapters off instead of a copy. Not exact: it learns in a rank-``r`` subspace (ablate it).
    lora_alpha: LoRA's scaling numerator (the update is ``alpha / rank * B @ A``; verl's default 16).
    lora_targets: the layers that get adapters: ``all-linear`` (every linear layer but the output
        head) or comma-separated module names (``q_proj,v_proj``).
    skip_uniform_prompts: before rolling a drawn prompt out, skip it with GRESO's probability
        (arXiv 2506.02177; :mod:`factrl.rl.prompt_skip`) when its latest groups were all-equal, and
        draw a prompt not drawn in the step instead. Approximate (ablate it); it acts only on prompts
        drawn before, i.e. from a run's second epoch of prompts on.
    skip_target_uniform: the share of all-equal groups per step the filter steers toward (a third
        all-right, two thirds all-wrong; GRESO's 0.25).
    free_caches: before each update, drop the policy engine's prefix cache along with its key/value
        slots (``LocalLLM.release``): the update changes the weights, after which the cache is
        cleared anyway, so keeping it through the update only holds its memory (up to 2 GiB).
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
    loss_agg: str = names_from(_loss_aggregations, "token-mean")
    norm_adv_by_std: bool = True
    adv_eps: float = 1e-6
    kl_coef: float = 0.001
    kl_type: str = names_from(_kl_estimators, "low_var_kl", suffix="+")
    entropy_coef: float = 0.0
    temperature: float = 1.0
    max_new_tokens: int = 256
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    device: Device = "auto"
    tis_cap: float = 2.0
    checkpoint_every: int = 10
    keep_checkpoints: int = 2
    keep_final_checkpoint: bool = False
    seed: int = 0
    dynamic_sampling: bool = False
    max_sampling_draws: int = 4
    redraw: Literal["full", "missing"] = "full"
    balance_by: str = ""
    chunked_logprobs: bool = True
    logprob_chunk: int = 256
    group_by_length: bool = True
    shared_prefix: bool = True
    lora_rank: int = 0
    lora_alpha: int = 16
    lora_targets: str = "all-linear"
    free_caches: bool = True
    skip_uniform_prompts: bool = False
    skip_target_uniform: float = 0.25


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
    planted_defect: a deliberate bug for the learning benchmark's ablations, a name of
        ``factrl.rl.defects.PLANTED_DEFECTS`` (``flip_advantage``, ``shuffled_reward``,
        ``mask_retrieved_tokens_off``); empty (the default) plants nothing. A run with one should
        gain nothing over its start: the benchmark shows the pipeline's gain depends on what it guards.
    """

    max_turns: int = 4
    max_context_tokens: int = 4096
    max_tool_response_tokens: int = 384
    max_prompts: int = 0
    retrieval_mode: Literal["bm25", "dense", "hybrid"] = "hybrid"
    top_k: int = 3
    planted_defect: str = names_from(_planted_defects, "")


@dataclass(frozen=True)
class VerlParams:
    """The cluster side of ``train.backend: verl``: verl's ``main_ppo`` on Ray, vLLM (or SGLang)
    rollouts, an FSDP actor (``factrl.recipes.haris.verl_rounds``; docs/scale.md).

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
    shared_prefix: forward the tokens every sequence of a batch starts with (the agent's system
        prompt and chat frame) once, their key/values shared by the batch's rows: the same loss and
        gradients to float rounding, fewer tokens forwarded (:func:`factrl.rl.sft.masked_lm_loss`).
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
    shared_prefix: bool = True
