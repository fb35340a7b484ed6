"""GRPO step speed: factrl's local trainer vs TRL's GRPOTrainer -> bench/results/grpo.json.

Both train SmolLM2-135M (the same checkpoint) on the same prompts, in this one process:
``--prompts`` prompts per step, ``--group`` completions each, exactly ``--length`` completion
tokens (EOS is disabled in both samplers so lengths cannot differ), temperature 1.0, no top-k /
top-p, one optimizer update per step (no gradient accumulation: one micro-batch of all
completions), AdamW lr 1e-6, KL to a frozen reference with coefficient 0.001 (k3), token-mean
loss, the same precision on both sides (``auto``: bf16 autocast only where the CPU computes bf16
natively, see factrl.hardware), the same reward (a checksum of the completion text).

A "GRPO step" is what each library does per optimizer update: sample the group, score it,
compute the loss and backward, step the optimizer. It is timed with ``perf_counter`` around
exactly that: our ``rollout + reward + GRPOTrainer.step``; TRL's ``on_step_begin`` ..
``on_step_end`` callback window (its generation runs inside the step). Model loading, trainer
construction and the first (warm-up) step are excluded. The phases are run ours, TRL, ours, so a
load change on the machine hits both; ``step_vs_trl`` is our median step time over TRL's
(< 1 = faster). Also reported: the same ratio for the generation and training parts, and
``peak_rss_gib``, the process's peak RSS after our phases, before TRL is loaded.

Usage: python -m bench.grpo [--steps 4] [--prompts 2] [--group 5] [--length 32]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench._measured import Measurement
from factrl.agents.rollout import RolloutParams, run_rollouts
from factrl.hardware import use_bf16
from factrl.llm.local import LocalLLM
from factrl.llm.models import load_model_and_tokenizer, resolve_model_path
from factrl.rl.params import GRPOParams
from factrl.rl.trainer import GRPOTrainer

RESULTS = Path(__file__).parent / "results" / "grpo.json"
PRECISION = "auto"  # what the pipeline uses: bf16 only where this CPU computes it natively
QUESTIONS = [
    "Is the claim 'The Nile flows into the Mediterranean' supported? Think step by step.",
    "Verify: Mount Everest is in the Alps.",
    "Was penicillin discovered by Alexander Fleming? Explain.",
    "Check the claim: the Moon has no gravity.",
]


def reward_text(text: str) -> float:
    """A checksum of the completion text in [0, 1): varies inside every group, so advantages are
    non-zero and both trainers do their full backward pass."""
    return (sum(map(ord, text)) % 101) / 101


def prompts(tok, n: int) -> list[str]:
    return [tok.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                                    tokenize=False, add_generation_prompt=True) for i in range(n)]


def ours(args, texts: list[str], steps: int, seed: int) -> dict[str, list[float]]:
    model, tok = load_model_and_tokenizer("smollm2-135m")
    cfg = replace(
        GRPOParams(), group_size=args.group, prompts_per_step=args.prompts, lr=1e-6, kl_coef=0.001,
        micro_batch_size=args.prompts * args.group, max_new_tokens=args.length, precision=PRECISION,
    )
    trainer = GRPOTrainer(model, tok, cfg)
    llm = LocalLLM(model_obj=model, tokenizer=tok, precision=PRECISION, max_batch=64)
    llm.eos_ids = set()  # sample exactly `length` tokens, as min_new_tokens does on the TRL side
    params = RolloutParams(max_new_tokens=args.length, temperature=1.0)
    prompt_ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    times: dict[str, list[float]] = {"step": [], "generate": [], "train": []}
    torch.manual_seed(seed)
    for i in range(steps + 1):
        t0 = time.perf_counter()
        trajs = run_rollouts(llm, prompt_ids, None, params, n=args.group)
        t1 = time.perf_counter()
        rewards = [reward_text(t.response_text) for t in trajs]
        groups = [k for k in range(len(texts)) for _ in range(args.group)]
        trainer.step(trajs, rewards, groups)
        t2 = time.perf_counter()
        assert all(len(t.response_ids) == args.length for t in trajs), "completion length not fixed"
        if i > 0:  # the first step warms up allocators and kernels
            times["step"].append(t2 - t0)
            times["generate"].append(t1 - t0)
            times["train"].append(t2 - t1)
    return times


def trl_run(args, texts: list[str], steps: int, workdir: Path) -> dict[str, list[float]]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig
    from trl import GRPOTrainer as TRLGRPOTrainer

    path = resolve_model_path("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    n = args.prompts * args.group
    config = GRPOConfig(
        output_dir=str(workdir / "trl"), use_cpu=True, bf16=use_bf16(PRECISION), report_to=[], save_strategy="no",
        logging_steps=1, max_steps=steps + 1, learning_rate=1e-6, lr_scheduler_type="constant",
        weight_decay=0.01, max_grad_norm=1.0, per_device_train_batch_size=n, gradient_accumulation_steps=1,
        num_generations=args.group, max_completion_length=args.length, temperature=1.0, top_p=1.0, top_k=0,
        beta=0.001, loss_type="bnpo", scale_rewards="group", epsilon=0.2, num_iterations=1,
        generation_kwargs={"min_new_tokens": args.length},  # no EOS before `length` tokens
        shuffle_dataset=False, dataloader_num_workers=0, seed=0, disable_dropout=True,
    )
    # the dataset repeats each prompt group-size times in order, as TRL's sampler expects
    data = Dataset.from_dict({"prompt": [t for t in texts for _ in range(steps + 1)]})

    def reward(completions, **_):
        return [reward_text(c) for c in completions]

    times: dict[str, list[float]] = {"step": [], "generate": [], "train": []}
    gen_time = [0.0]

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            gen_time[0] = 0.0
            self.t0 = time.perf_counter()

        def on_step_end(self, state_args, state, control, **k):
            dt = time.perf_counter() - self.t0
            if state.global_step > 1:
                times["step"].append(dt)
                times["generate"].append(gen_time[0])
                times["train"].append(dt - gen_time[0])

    trainer = TRLGRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=data,
                             processing_class=tok, callbacks=[StepTimer()])
    generate = trainer._generate_single_turn

    def timed_generate(*a, **k):  # generation share of the step (TRL's sampler, without scoring)
        t = time.perf_counter()
        out = generate(*a, **k)
        gen_time[0] += time.perf_counter() - t
        return out

    trainer._generate_single_turn = timed_generate
    trainer.train()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group", type=int, default=5)
    ap.add_argument("--length", type=int, default=32)
    args = ap.parse_args()
    import tempfile

    import trl

    measured = Measurement(PRECISION)
    _, tok = load_model_and_tokenizer("smollm2-135m")
    texts = prompts(tok, args.prompts)
    a = ours(args, texts, args.steps, seed=0)
    peak_ours = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    with tempfile.TemporaryDirectory() as tmp:
        b = trl_run(args, texts, args.steps, Path(tmp))
    c = ours(args, texts, args.steps, seed=1)
    mine = {k: a[k] + c[k] for k in a}
    med = {k: statistics.median(v) for k, v in mine.items()}
    med_trl = {k: statistics.median(v) for k, v in b.items()}
    result = {
        "step_vs_trl": med["step"] / med_trl["step"],
        "generate_vs_trl": med["generate"] / med_trl["generate"],
        "train_vs_trl": med["train"] / med_trl["train"],
        "peak_rss_gib": peak_ours,
        "median_step_s": {"factrl": med["step"], "trl": med_trl["step"]},
        "median_generate_s": {"factrl": med["generate"], "trl": med_trl["generate"]},
        "median_train_s": {"factrl": med["train"], "trl": med_trl["train"]},
        "runs_s": {"factrl": mine, "trl": b},
        "setup": {
            "model": "smollm2-135m", "prompts_per_step": args.prompts, "group_size": args.group,
            "completion_tokens": args.length, "timed_steps": {"factrl": len(mine["step"]), "trl": len(b["step"])},
            "lr": 1e-6, "kl_coef": 0.001, "loss": "token-mean (TRL bnpo)", "bf16_autocast": use_bf16(PRECISION),
            "grad_accum": 1, "trl_version": trl.__version__, "torch": torch.__version__,
            "timing": "perf_counter around sample+score+loss+backward+optimizer per step; warm-up step "
                      "excluded; order factrl, TRL, factrl; medians",
        },
    }
    measured.write(result, RESULTS)
    print({k: result[k] for k in ("step_vs_trl", "generate_vs_trl", "train_vs_trl", "peak_rss_gib")})


if __name__ == "__main__":
    main()
