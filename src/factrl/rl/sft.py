"""Supervised fine-tuning on agent trajectories with the GRPO loss mask: the warm start's trainer.

An example is one trajectory laid out as a rollout lays it out (:func:`factrl.agents.rollout.replay`):
``prompt_ids + response_ids`` as input, and as labels the response ids whose loss mask is 1 (what
the agent wrote), -100 everywhere else (the prompt, the response prefix, every injected
``<result>``: retrieved passages and search reports). So the warm start trains exactly the tokens
GRPO trains later, and nothing the environment wrote.

Training is transformers' :class:`~transformers.Trainer`, with one change: the loss
(:class:`MaskedLMTrainer`) runs the output layer only at positions that predict a trained token
(the model's ``logits_to_keep``), not over the prompt, whose logits no loss reads (the
49k-word output layer is a fifth of SmolLM2's compute per token, and its logits most of the
activation memory). The loss is the cross-entropy summed over trained tokens and divided by the
trained tokens of the whole optimizer step (a token mean, as GRPO's), with AdamW, warm-up and
decay, gradient clipping, bf16 autocast where
:mod:`factrl.hardware` says the hardware computes it natively, seeded data order, and checkpoints
every ``checkpoint_every`` steps that a killed run resumes from (weights, optimizer, scheduler,
data position, RNG states). Batches group sequences of similar length, in a random order (not
transformers' longest-first sweep), and are right-padded, so positions count real tokens as in
generation.

The loss curve is logged with DVCLive while the run trains (:func:`_loss_curves`, a Trainer callback
writing through :class:`factrl.rl.step_log.StepLog` at each optimizer step) into a DVCLive directory,
and rewritten from the Trainer's whole log history when it ends, so a resumed run's curve equals an
uninterrupted run's.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from factrl.hardware import resolve_device, use_bf16
from factrl.rl.params import SFTParams
from factrl.rl.step_log import StepLog, write_history

IGNORE_INDEX = -100  # the label of a token that gets no loss (the causal LMs' ignore_index)
CURVES_DIR = "curves"  # the run's DVCLive directory in out_dir when train_sft is given none


def sft_example(trajectory) -> dict[str, list[int]]:
    """``{input_ids, labels}`` of one trajectory (anything with ``prompt_ids``, ``response_ids``
    and ``loss_mask``): labels are the response ids of loss-mask-1 tokens, -100 elsewhere."""
    prompt, response, mask = list(trajectory.prompt_ids), list(trajectory.response_ids), list(trajectory.loss_mask)
    if len(mask) != len(response):
        raise ValueError(f"loss_mask has {len(mask)} entries for {len(response)} response ids")
    labels = [IGNORE_INDEX] * len(prompt) + [t if m else IGNORE_INDEX for t, m in zip(response, mask)]
    return {"input_ids": prompt + response, "labels": labels}


def collate(features: Sequence[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad ``b`` examples into ``input_ids`` / ``attention_mask`` / ``labels`` ``[b, T]``
    (padding: ``pad_id``, mask 0, label -100)."""
    width = max(len(f["input_ids"]) for f in features)
    ids, attn, labels = [], [], []
    for f in features:
        pad = width - len(f["input_ids"])
        ids.append(list(f["input_ids"]) + [pad_id] * pad)
        attn.append([1] * len(f["input_ids"]) + [0] * pad)
        labels.append(list(f["labels"]) + [IGNORE_INDEX] * pad)
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(attn), "labels": torch.tensor(labels)}


def masked_lm_loss(model, inputs: dict[str, torch.Tensor], num_items: int | torch.Tensor | None = None,
                   shared_prefix: bool = False) -> torch.Tensor:
    """Summed next-token cross-entropy over the labelled tokens of ``inputs`` (``input_ids``,
    ``attention_mask``, ``labels`` ``[b, T]``), divided by ``num_items`` (default: their count).

    Logits ``[b, K, V]`` are computed only at the ``K`` positions whose next token has a label in
    some row (``logits_to_keep`` as an index tensor), so the prompt costs no output layer.
    ``shared_prefix``: the tokens every row starts with (the agent's system prompt and chat frame,
    :func:`shared_prefix_length`) run once, their key/values repeated for the rows, which run on top
    of them: the same loss and gradients to float rounding, for ``(b - 1) * P`` fewer forwarded tokens.
    """
    target = inputs["labels"][:, 1:]  # position p predicts token p + 1
    keep = (target != IGNORE_INDEX).any(dim=0).nonzero().squeeze(-1)
    ids, attention = inputs["input_ids"], inputs["attention_mask"]
    shared = shared_prefix_length(ids, inputs["labels"]) if shared_prefix else 0
    if shared > 0:
        prefix = model.get_decoder()(input_ids=ids[:1, :shared], use_cache=True)  # no logits: none is read
        cache = prefix.past_key_values
        cache.batch_repeat_interleave(ids.shape[0])
        positions = torch.arange(shared, ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
        logits = model(input_ids=ids[:, shared:], attention_mask=attention, position_ids=positions,
                       past_key_values=cache, logits_to_keep=keep - shared, use_cache=True).logits
    else:
        logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=keep, use_cache=False).logits
    target = target[:, keep]
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1),
                                             ignore_index=IGNORE_INDEX, reduction="sum")
    return loss / (num_items if num_items is not None else (target != IGNORE_INDEX).sum())


def shared_prefix_length(input_ids: torch.Tensor, labels: torch.Tensor, min_tokens: int = 16) -> int:
    """How many leading tokens every row of ``input_ids`` ``[b, T]`` shares and no loss reads: the
    common prefix, cut so that no position in it predicts a labelled token and every row keeps a
    token of its own (right padding: a row's real tokens come first). 0 when that is under
    ``min_tokens`` or there is one row (nothing to share)."""
    b = input_ids.shape[0]
    if b < 2:
        return 0
    differs = (input_ids != input_ids[:1]).any(dim=0).nonzero()
    common = int(differs[0]) if len(differs) else input_ids.shape[1] - 1
    labelled = (labels[:, 1:] != IGNORE_INDEX).any(dim=0).nonzero()  # position p predicts token p + 1
    if len(labelled):
        common = min(common, int(labelled[0]))
    return common if common >= min_tokens else 0


def _shuffled_length_grouped_sampler():
    from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

    class ShuffledLengthGroupedSampler(LengthGroupedSampler):
        """transformers' length grouping (each batch holds examples of similar length, so little
        padding) with the batches in a random order.

        transformers sorts every mega-batch (up to 50 batches) longest first, so its steps sweep
        from the longest examples to the shortest, over and over. The reasoning agent's references
        grow with the claim's hops, so that order is runs of 4-hop steps, then 3-hop, then 2-hop,
        and a warm start cut short of an epoch (the demo's) ends on whichever hop count the cut
        falls in.
        """

        def __iter__(self):
            order = get_length_grouped_indices(self.lengths, self.batch_size, generator=self.generator)
            # mega-batches are whole batches but the last, so every slice of batch_size is one grouped
            # batch; a short last one stays last (the data loader cuts the order every batch_size)
            batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
            full = len(batches) - (len(batches[-1]) < self.batch_size if batches else 0)
            shuffled = torch.randperm(full, generator=self.generator).tolist() + list(range(full, len(batches)))
            return iter([i for b in shuffled for i in batches[b]])

    return ShuffledLengthGroupedSampler


def _masked_lm_trainer(shared_prefix: bool = False):
    from transformers import Trainer
    from transformers.trainer_pt_utils import LengthGroupedSampler

    sampler_class = _shuffled_length_grouped_sampler()

    class MaskedLMTrainer(Trainer):
        """transformers' Trainer with :func:`masked_lm_loss` (already normalised over the whole
        accumulated batch by ``num_items_in_batch``, the trained tokens of the optimizer step; a batch's
        common prompt forwarded once under ``shared_prefix``), and length-grouped batches in a random
        order (:func:`_shuffled_length_grouped_sampler`)."""

        loss_is_scaled_for_ga = True

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.model_accepts_loss_kwargs = True  # so the Trainer counts num_items_in_batch for every model

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = masked_lm_loss(model, inputs, num_items_in_batch, shared_prefix=shared_prefix)
            return (loss, None) if return_outputs else loss

        def _get_train_sampler(self, train_dataset=None):
            sampler = super()._get_train_sampler(train_dataset)
            if isinstance(sampler, LengthGroupedSampler):
                return sampler_class(sampler.batch_size, lengths=sampler.lengths, generator=sampler.generator)
            return sampler

    return MaskedLMTrainer


def loss_row(entry: dict) -> dict:
    """The curve row of one Trainer log entry that has a ``loss`` (an optimizer step's):
    ``{step, loss, lr, grad_norm}``, ``step`` taken from ``entry`` or given by the caller."""
    return {"step": entry["step"], "loss": entry["loss"], "lr": entry.get("learning_rate"),
            "grad_norm": entry.get("grad_norm")}


def _loss_curves(curves_dir: Path, history: Sequence[dict]):
    """A Trainer callback that logs each optimizer step's loss row to the DVCLive directory
    ``curves_dir``, rebuilt first from ``history`` (the log history of the checkpoint a run resumes
    from; the Trainer restores it only after ``on_train_begin``, so it is passed in).

    transformers' own ``DVCLiveCallback`` does not fit a resumable pipeline stage: it counts steps
    by log calls (not ``global_step``), starts the curve over on a resume, logs the end-of-run
    summary (its wall-clock runtime) as one more step and every TrainingArguments field as params."""
    from transformers import TrainerCallback

    class LossCurves(TrainerCallback):
        def __init__(self) -> None:
            self.curves = StepLog(curves_dir, [loss_row(h) for h in history if "loss" in h])

        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and logs and "loss" in logs:
                self.curves.log(loss_row({**logs, "step": state.global_step}))

    return LossCurves()


class _Examples(torch.utils.data.Dataset):
    def __init__(self, examples: Sequence[dict]) -> None:
        self.examples = list(examples)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict:
        return self.examples[i]


@dataclass
class SFTResult:
    """What one fine-tuning run did (the stage's summary reports it)."""

    examples: int
    steps: int
    tokens: int  # non-padding input tokens the run processed (all epochs, this session and before)
    trained_tokens: int  # tokens with a label in one pass over the examples
    wall_s: float  # this session's training time
    tokens_per_s: float  # non-padding tokens per second of this session
    first_loss: float | None
    final_loss: float | None
    resumed_from: int | None  # the step a killed run resumed from
    precision: str
    losses: list[dict] = field(default_factory=list)  # loss_row per optimizer step: step, loss, lr, grad_norm


def _args(cfg: SFTParams, out_dir: Path, *, seed: int, bf16: bool, cpu: bool):
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(out_dir),
        per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
        num_train_epochs=cfg.epochs, max_steps=cfg.max_steps if cfg.max_steps > 0 else -1,
        learning_rate=cfg.lr, lr_scheduler_type=cfg.lr_scheduler if cfg.lr_scheduler != "constant"
        else "constant_with_warmup", warmup_steps=cfg.warmup_ratio, weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm, seed=seed, data_seed=seed, bf16=bf16, use_cpu=cpu,
        train_sampling_strategy="group_by_length", save_strategy="steps", save_steps=cfg.checkpoint_every,
        save_total_limit=cfg.keep_checkpoints, save_only_model=False, logging_strategy="steps", logging_steps=1,
        include_num_input_tokens_seen="non_padding", remove_unused_columns=False, report_to="none",
        disable_tqdm=True, dataloader_pin_memory=False, dataloader_num_workers=0,
    )


def last_complete_checkpoint(out_dir: Path) -> str | None:
    """The newest ``checkpoint-<step>`` in ``out_dir`` the Trainer finished writing, else None.

    The Trainer writes ``trainer_state.json`` last (after weights, optimizer, scheduler and RNG
    state), so a checkpoint whose state file is missing or does not parse was cut short by a kill;
    such newer ones are removed (resuming from one fails on the missing file, found by
    bench/reliability_kills.py killing ``warmup`` mid-save)."""
    if not out_dir.is_dir():
        return None
    steps = sorted((p for p in out_dir.glob("checkpoint-*") if p.is_dir() and p.name.rsplit("-", 1)[-1].isdigit()),
                   key=lambda p: int(p.name.rsplit("-", 1)[-1]), reverse=True)
    for path in steps:
        try:
            json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
            return str(path)
        except (OSError, ValueError):
            shutil.rmtree(path)
    return None


def finished(state) -> bool:
    """Whether a checkpoint's ``TrainerState`` is the end of its run (``global_step`` reached the
    ``max_steps`` the Trainer planned: ``cfg.max_steps``, or the steps of ``cfg.epochs``)."""
    return state.max_steps > 0 and state.global_step >= state.max_steps


def train_sft(model, tokenizer, examples: Sequence[dict], cfg: SFTParams, out_dir: str | Path, *,
              seed: int = 0, precision: str = "auto", callbacks: Sequence = (),
              curves_dir: str | Path | None = None) -> SFTResult:
    """Fine-tune ``model`` in place on ``examples`` (:func:`sft_example` dicts); checkpoints go to
    ``out_dir``, and a run restarted on the same ``out_dir`` resumes from the newest one.

    The per-step losses (:func:`loss_row`: step, loss, lr, grad_norm) are logged with DVCLive to
    ``curves_dir`` (default ``out_dir/curves``). ``callbacks`` are transformers ``TrainerCallback``
    objects (progress logs, tests).
    """
    if not examples:
        raise ValueError("no examples to fine-tune on")
    if any(all(x == IGNORE_INDEX for x in e["labels"]) for e in examples):
        raise ValueError("an example has no trained token (every label is -100)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device if any(True for _ in model.parameters()) else resolve_device()
    bf16 = use_bf16(precision, device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    last = last_complete_checkpoint(out_dir)
    curves_dir = Path(curves_dir) if curves_dir is not None else out_dir / CURVES_DIR
    saved = None
    if last is not None:
        from transformers import TrainerState

        saved = TrainerState.load_from_json(str(Path(last) / "trainer_state.json"))
    args = _args(cfg, out_dir, seed=seed, bf16=bf16, cpu=device.type == "cpu")
    live = _loss_curves(curves_dir, saved.log_history if saved is not None else [])
    trainer = _masked_lm_trainer(cfg.shared_prefix)(model=model, args=args, train_dataset=_Examples(examples),
                                   data_collator=lambda f: collate(f, pad_id), callbacks=[*callbacks, live])
    start = time.perf_counter()
    tokens_before = saved.num_input_tokens_seen if saved is not None else 0
    if saved is not None and finished(saved):
        # killed after its last checkpoint, before the caller saved the model: the checkpoint is the
        # result. transformers 5.23 does not check max_steps before its first step on resume, so
        # train() from a final checkpoint that ends mid-epoch trains one step more (found killing
        # warmup late: a different search agent, loss curve and summary)
        trainer._load_from_checkpoint(last)  # the Trainer's own resume path (tied weights, shards)
        trainer.state = saved
    else:
        trainer.train(resume_from_checkpoint=last)
    wall = time.perf_counter() - start
    model.eval()
    state = trainer.state
    losses = [loss_row(h) for h in state.log_history if "loss" in h]
    write_history(losses, curves_dir)  # the whole history, also where no step ran (a finished checkpoint)
    tokens = int(state.num_input_tokens_seen)
    return SFTResult(
        examples=len(examples), steps=int(state.global_step), tokens=tokens,
        trained_tokens=sum(sum(x != IGNORE_INDEX for x in e["labels"]) for e in examples),
        wall_s=wall, tokens_per_s=(tokens - tokens_before) / wall if wall > 0 else 0.0,
        first_loss=losses[0]["loss"] if losses else None, final_loss=losses[-1]["loss"] if losses else None,
        resumed_from=int(Path(last).name.rsplit("-", 1)[-1]) if last else None,
        precision="bf16" if bf16 else "fp32", losses=losses)

