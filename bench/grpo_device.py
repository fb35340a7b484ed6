"""GRPO step speed of SmolLM2-135M on a CUDA device against the same machine's CPU -> bench/results/grpo_device.json.

One process runs factrl's own rollout engine (``LocalLLM``, key/value slots) and trainer
(``GRPOTrainer``: loss, backward, AdamW, a frozen reference for the KL term) on each device in
``--devices``, in the order given and then once more in reverse, so a change of load on the machine
hits every device. A step is what the pipeline does per optimizer update: sample ``--prompts`` x
``--group`` completions of exactly ``--length`` tokens (EOS disabled, so lengths cannot differ
between devices), score them (a checksum of the text, so every group has spread and the backward pass
is full), one ``GRPOTrainer.step``. Prompts are ``--prompt-tokens`` long, about what the reasoning
agent's context holds after two searches. ``precision`` is the pipeline's ``auto``: bf16 on a CUDA
device that supports it, and on a CPU only where it computes bf16 natively (factrl.hardware).

``--weights random`` builds the model from SmolLM2-135M's config with seeded random weights. With EOS
disabled a step's work depends only on the shapes, not on the weights' values, so its time is the
checkpoint's; GPU machines here have no network and the checkpoint (0.5 GB) is too large to carry.
``--weights real`` loads the checkpoint (the default where it exists).

Reported per device: median step, generate and train seconds (first step excluded: it warms kernels
and allocators), completion tokens per second, and on CUDA the peak memory allocated; ``cuda_vs_cpu``
is the ratio of median step times (< 1: the GPU is faster).

Usage: python -m bench.grpo_device [--devices cuda cpu] [--steps 3] [--prompts 4] [--group 8]
                                   [--length 64] [--prompt-tokens 600] [--weights auto|real|random]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from bench._measured import Measurement
from factrl.agents.rollout import RolloutParams, run_rollouts
from factrl.hardware import resolve_device, use_bf16
from factrl.llm.local import LocalLLM
from factrl.llm.models import resolve_model_path
from factrl.rl.params import GRPOParams

RESULTS = Path(__file__).parent / "results" / "grpo_device.json"
PRECISION = "auto"
MODEL = "smollm2-135m"
PASSAGE = ("Orlen Studios is a film production company founded in 1994 by Ilse Parrow. Its headquarters "
           "are in Vessan, and it produced the film Kavelo, which was released in 1998. ")


def reward_text(text: str) -> float:
    """A checksum of the completion text in [0, 1): spread inside every group."""
    return (sum(map(ord, text)) % 101) / 101


def load(weights: str):
    """SmolLM2-135M and its tokenizer: the checkpoint, or its config with seeded random weights."""
    path = resolve_model_path(MODEL)
    tok = AutoTokenizer.from_pretrained(path)
    if weights == "auto":
        weights = "real" if any(Path(path).glob("*.safetensors")) else "random"
    if weights == "real":
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), tok, weights
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=torch.float32), tok, weights


def prompt_ids(tok, n: int, tokens: int) -> list[list[int]]:
    """``n`` chat prompts of about ``tokens`` tokens: repeated passages and a claim to verify."""
    body = PASSAGE * max(1, tokens // len(tok(PASSAGE)["input_ids"]))
    out = []
    for i in range(n):
        text = tok.apply_chat_template([{"role": "user", "content": f"{body}\nClaim {i}: Kavelo was produced in Vessan."}],
                                       tokenize=False, add_generation_prompt=True)
        out.append(tok(text, add_special_tokens=False)["input_ids"])
    return out


def run_device(args, device: str, weights: str, seed: int) -> dict:
    """``args.steps + 1`` GRPO steps on ``device``; per-step times of all but the first."""
    from factrl.rl.trainer import GRPOTrainer

    dev = resolve_device(device)
    model, tok, used = load(weights)
    model.to(dev)
    cfg = replace(GRPOParams(), group_size=args.group, prompts_per_step=args.prompts, lr=1e-6, kl_coef=0.001,
                  micro_batch_size=args.micro_batch, max_new_tokens=args.length, precision=PRECISION)
    trainer = GRPOTrainer(model, tok, cfg)
    llm = LocalLLM(model_obj=model, tokenizer=tok, precision=PRECISION, max_batch=args.prompts * args.group)
    llm.eos_ids = set()  # exactly `length` tokens per completion on every device
    params = RolloutParams(max_new_tokens=args.length, temperature=1.0)
    prompts = prompt_ids(tok, args.prompts, args.prompt_tokens)
    groups = [k for k in range(args.prompts) for _ in range(args.group)]
    times: dict[str, list[float]] = {"step": [], "generate": [], "train": []}
    torch.manual_seed(seed)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for i in range(args.steps + 1):
        sync()
        t0 = time.perf_counter()
        trajs = run_rollouts(llm, prompts, None, params, n=args.group)
        sync()
        t1 = time.perf_counter()
        metrics = trainer.step(trajs, [reward_text(t.response_text) for t in trajs], groups)
        llm.release()  # what train() does after each step's rollouts
        sync()
        t2 = time.perf_counter()
        assert all(len(t.response_ids) == args.length for t in trajs), "completion length not fixed"
        assert metrics["pg_loss"] == metrics["pg_loss"] and metrics["grad_norm"] == metrics["grad_norm"], "NaN"
        if i > 0:
            times["step"].append(t2 - t0)
            times["generate"].append(t1 - t0)
            times["train"].append(t2 - t1)
    out = {
        "device": str(dev), "weights": used, "bf16": use_bf16(PRECISION, dev), "runs_s": times,
        "prompt_tokens": len(prompts[0]),
    }
    if dev.type == "cuda":
        out["cuda_peak_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
        out["cuda_name"] = torch.cuda.get_device_name(dev)
    del trainer, llm, model
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return out


def summarize(runs: list[dict], args) -> dict:
    """Medians per device over all its runs, completion tokens per second, and the ratio to the CPU."""
    per_device: dict[str, dict] = {}
    for run in runs:
        d = per_device.setdefault(run["device"], {k: v for k, v in run.items() if k != "runs_s"} | {"runs_s": []})
        d["runs_s"].append(run["runs_s"])
        if "cuda_peak_gib" in run:
            d["cuda_peak_gib"] = max(d.get("cuda_peak_gib", 0.0), run["cuda_peak_gib"])
    tokens = args.prompts * args.group * args.length
    for d in per_device.values():
        for part in ("step", "generate", "train"):
            d[f"median_{part}_s"] = statistics.median(t for r in d["runs_s"] for t in r[part])
        d["completion_tokens_per_s"] = tokens / d["median_generate_s"]
    result: dict = {"devices": per_device}
    cuda = next((d for name, d in per_device.items() if name.startswith("cuda")), None)
    if cuda is not None and "cpu" in per_device:
        cpu = per_device["cpu"]
        for part in ("step", "generate", "train"):
            result[f"{part}_cuda_vs_cpu"] = cuda[f"median_{part}_s"] / cpu[f"median_{part}_s"]
    result["setup"] = {
        "model": MODEL, "prompts_per_step": args.prompts, "group_size": args.group, "completion_tokens": args.length,
        "prompt_tokens": args.prompt_tokens, "micro_batch_size": args.micro_batch, "timed_steps_per_run": args.steps,
        "order": [r["device"] for r in runs], "lr": 1e-6, "kl_coef": 0.001, "precision": PRECISION,
        "torch": torch.__version__, "cpu_threads": torch.get_num_threads(),
        "timing": "perf_counter around rollout+reward+GRPOTrainer.step, CUDA synchronized at each boundary; "
                  "first step of each run excluded; medians over all runs of a device",
    }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", nargs="+", default=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=600)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--weights", choices=["auto", "real", "random"], default="auto")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    measured = Measurement(PRECISION)
    order = args.devices + args.devices[::-1]
    runs = [run_device(args, device, args.weights, seed=i) for i, device in enumerate(order)]
    result = summarize(runs, args)
    measured.write(result, args.out)
    print({k: v for k, v in result.items() if k.endswith("cuda_vs_cpu")},
          {name: round(d["median_step_s"], 3) for name, d in result["devices"].items()})


if __name__ == "__main__":
    main()
