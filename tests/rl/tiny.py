"""A tiny random Llama with the SmolLM2 tokenizer, and a complete GRPO run on it.

Used by the trainer tests in-process and, for the kill/resume test, as a script:
``python -m tests.rl.tiny OUT_DIR [KILL_AFTER_STEP] [--dynamic]`` trains and, when asked, SIGKILLs
itself right after that step (before any checkpoint of it), as a crash would; ``--dynamic`` runs
:data:`DYNAMIC_CFG` (dynamic sampling, the pre-rollout filter) with :func:`parity_reward`, whose groups are often uniform.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from factrl.agents.rollout import RolloutParams, run_rollouts
from factrl.llm.local import LocalLLM
from factrl.llm.models import resolve_model_path
from factrl.rl.params import GRPOParams
from factrl.rl.trainer import GRPOTrainer, train

CURVES_DIR = "curves"  # run()'s DVCLive directory in its out_dir

TINY_CFG = GRPOParams(
    group_size=2, prompts_per_step=2, steps=4, lr=1e-3, micro_batch_size=2, max_new_tokens=6,
    checkpoint_every=2, keep_checkpoints=2, seed=3, precision="bf16",
)
PROMPTS = ["The capital of France is", "Verify: water boils at 100 C.", "Two plus two", "Hello"]


def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m"))


def tiny_model(tok, seed: int = 0, vocab_size: int | None = None, init_std: float = 0.02) -> LlamaForCausalLM:
    """A random 2-layer Llama. ``vocab_size`` below the tokenizer's keeps it to the first ids (a small
    vocabulary repeats itself, so n-gram drafts appear); a larger ``init_std`` sharpens its distributions."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size or len(tok), initializer_range=init_std, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval()


def checksum_reward(items, trajectories) -> list[float]:
    """A number in [0, 1) that differs between almost any two samples (a checksum of the token ids),
    so groups have non-zero advantages; it rewards nothing meaningful, the tests check mechanics."""
    return [(sum(t.response_ids) % 101) / 101 for t in trajectories]


def parity_reward(items, trajectories) -> list[float]:
    """0 or 1 by the parity of the token-id sum: a group of 2 is uniform about half the time, so
    dynamic sampling drops groups and draws again."""
    return [float(sum(t.response_ids) % 2) for t in trajectories]


# dynamic sampling with a cap that some steps reach (prompts_per_step 2 of 4 prompts, 3 draws), and the
# pre-rollout filter, whose state (prompt histories, exploration probabilities) a resume must restore
DYNAMIC_CFG = replace(TINY_CFG, dynamic_sampling=True, max_sampling_draws=3, skip_uniform_prompts=True)


def make_rollout_fn(model, tok, cfg: GRPOParams):
    llm = LocalLLM(model_obj=model, tokenizer=tok, precision=cfg.precision)
    params = RolloutParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature)

    def rollout(items, n):
        prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in items]
        return run_rollouts(llm, prompts, None, params, n=n)

    return rollout


def run(out_dir: str, kill_after: int | None = None, cfg: GRPOParams = TINY_CFG, reward_fn=checksum_reward
        ) -> list[dict]:
    # DVCLive's logger, imported here: a bare GPU machine imports this module (tiny_model) without dvclive
    from factrl.rl.step_log import StepLog

    tok = tokenizer()
    model = tiny_model(tok)
    trainer = GRPOTrainer(model, tok, cfg)

    def on_step(row):
        if kill_after is not None and row["step"] == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    return train(trainer, PROMPTS, make_rollout_fn(model, tok, cfg), reward_fn, out_dir, on_step=on_step,
                 curves=functools.partial(StepLog, Path(out_dir) / CURVES_DIR))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--dynamic"]
    dynamic = "--dynamic" in sys.argv
    run(args[0], int(args[1]) if len(args) > 1 else None, DYNAMIC_CFG if dynamic else replace(TINY_CFG),
        parity_reward if dynamic else checksum_reward)
