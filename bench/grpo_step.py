"""The cost of one GRPO step of the reasoning agent, levers off and on -> bench/results/grpo_step.json.

One step is what ``factrl.rl.trainer.train`` runs per optimizer update in ``train_reason``: draw the
profile's claims (``train.reasoning``: ``prompts_per_step`` x ``group_size`` rollouts, dynamic
sampling's extra draws), roll the policy out with the frozen search agent answering its questions
(``recipes.haris.rounds``: the same rollout, tool and reward functions as the stage), score, one
``GRPOTrainer.step``. The timings are train()'s own per-step row (``rollout_time``,
``train_time``, ``step_time``) and its per-engine counters (``engine_<label>_*``), so the bench
measures exactly what a run logs.

Configurations, each in a child process of its own (its peak RSS is its own), same seed, same
weights, same commit: ``baseline`` (every lever off: the code path before issue 48), ``optimized``
(every lever on: the defaults), and for each lever, ``optimized`` with that lever alone off
(``levers[name].step_s``). The levers: ``chunked_logprobs``, ``group_by_length`` and
``shared_prefix`` (``GRPOParams``), ``free_caches`` (the policy engine's prefix cache dropped before the update),
``memoize_search`` (``LocalLLM.memoize_greedy`` on the frozen search agent's engine). Medians are
over the steps after the first (which warms allocators and kernels). ``same_rollouts``: whether the
first step drew identical rewards in every configuration (every lever here is exact). ``approximate``:
the optimized step with LoRA adapters (``--lora-rank``, ``GRPOParams.lora_rank``), timed only: LoRA
changes what is learned, which the learning benchmarks ablate.

Reward: by default a checksum of the response's token ids (``--reward checksum``), so every group mixes
and the update runs in full: base SmolLM2 earns no verdict reward at temperature 1, which would leave
every group uniform and no update to time (``--reward profile``: the stage's own reward, for
warm-started agents). With it dynamic sampling keeps the first draw's groups (one draw per step).

Setup: the demo world (``data.world``, 2,000 passages, bm25 index) and SmolLM2-135M as both the
policy and the search agent, not the pipeline's warm-started agents (the bench needs no pipeline
run); their answers differ in content, not in what a step computes. ``--tiny`` builds both from a
small Llama config with random weights instead (a bare CUDA machine: torch, transformers, numpy,
pyarrow; the retriever is then a word-overlap scan of the same world's passages).

``matmul_gflops`` is measured in the run: a GEMM of the update's shape class
(``[4096, H] x [H, 4H]``, H the model's hidden size) in the trainer's precision. ``update_tokens_per_s``
counts the tokens the policy's passes ran over (padding included); the GEMM-bound ceiling for that
is ``matmul_gflops / (6 * params)`` (forward 2, backward 4 flops per parameter per token).

Usage: python -m bench.grpo_step [--profile demo|hard] [--steps 4] [--lever-steps 2] [--device cpu]
                                  [--tiny] [--out bench/results/grpo_step.json]
The hard profile's trainer peaks at 18-20 GB: run it only on a machine with room for it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results" / "grpo_step.json"
ROOT = Path(__file__).resolve().parents[1]
LEVERS = ("chunked_logprobs", "group_by_length", "shared_prefix", "free_caches", "memoize_search")
NUM_CLAIMS = 64


# ---- the step's inputs ------------------------------------------------------------------------

def reasoning_params(profile: str):
    """The profile's ``train.reasoning`` section (params.yaml, with profiles/<profile>.yaml merged).
    Where ruamel.yaml is missing (a bare CUDA machine), the demo's is read with PyYAML (transformers
    brings it) into the same dataclass."""
    from factrl.config import from_dict, load_section
    from factrl.recipes.haris.params import ReasonTrainParams, TrainParams

    try:
        import ruamel.yaml  # noqa: F401
    except ImportError:
        if profile != "demo":
            raise
        import yaml

        raw = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["train"]["reasoning"]
        return from_dict(ReasonTrainParams, raw, "train.reasoning")
    from factrl.profiles import apply_profile

    with tempfile.TemporaryDirectory() as tmp:
        params = Path(tmp) / "params.yaml"
        shutil.copy(ROOT / "params.yaml", params)
        if profile != "demo":
            apply_profile(profile, params)
        return load_section(TrainParams, params).reasoning


class OverlapRetriever:
    """Top-k passages by shared words: the retriever of ``--tiny`` runs (no bm25 on a bare machine)."""

    def __init__(self, passages: list[str]):
        self.passages = passages
        self.words = [set(p.lower().split()) for p in passages]

    def search(self, queries: list[str], k: int = 3) -> list[list[dict]]:
        out = []
        for q in queries:
            words = set(q.lower().split())
            best = sorted(range(len(self.passages)), key=lambda i: -len(words & self.words[i]))[:k]
            out.append([{"text": self.passages[i], "title": "", "score": float(len(words & self.words[i]))}
                        for i in best])
        return out


def world(tmp: Path, tiny: bool):
    """The demo world's claims (training items) and a retriever over its passages."""
    import pyarrow.parquet as pq

    from factrl.data.params import WorldParams
    from factrl.data.world import write_world
    from factrl.recipes.haris.rounds import reasoning_items

    write_world(WorldParams(seed=13, num_passages=2000, num_claims=NUM_CLAIMS, hops=(2, 3)),
                tmp / "passages.parquet", tmp / "claims.parquet")
    items = reasoning_items(pq.read_table(tmp / "claims.parquet"))
    if tiny:
        return items, OverlapRetriever(pq.read_table(tmp / "passages.parquet").column("text").to_pylist())
    from factrl.retrieval.index import Retriever, build_index

    build_index(tmp / "passages.parquet", tmp / "index", embedder=None)
    return items, Retriever(tmp / "index", mode="bm25")


def models(tiny: bool, device: torch.device):
    """(policy, frozen search agent, tokenizer): SmolLM2-135M twice, or two tiny random Llamas."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from factrl.llm.models import load_model_and_tokenizer, resolve_model_path

    if not tiny:
        policy, tok = load_model_and_tokenizer("smollm2-135m", device=device)
        search, _ = load_model_and_tokenizer("smollm2-135m", device=device)
        return policy, search.requires_grad_(False), tok
    tok = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m"))
    config = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    policy = LlamaForCausalLM(config).to(device).eval()
    search = LlamaForCausalLM(config).to(device).eval().requires_grad_(False)
    search.load_state_dict(policy.state_dict())
    return policy, search, tok


def checksum_reward(items, trajectories) -> list[float]:
    """A checksum of each response's token ids in [0, 1): spread inside every group, so every group is
    kept and the update runs in full. The base SmolLM2 (and a random tiny model) earns no verdict
    reward at temperature 1 (params.yaml: none of 12 untrained rollouts valid), which would leave
    every group uniform and the step without an update to measure."""
    return [(sum(t.response_ids) % 101) / 101 for t in trajectories]


def matmul_gflops(hidden: int, bf16: bool, device: torch.device, reps: int = 5) -> float:
    """Measured GEMM rate of ``[4096, hidden] x [hidden, 4 * hidden]`` in the trainer's dtype."""
    dtype = torch.bfloat16 if bf16 else torch.float32
    a = torch.randn(4096, hidden, device=device, dtype=dtype)
    b = torch.randn(hidden, 4 * hidden, device=device, dtype=dtype)
    times = []
    for _ in range(reps + 1):
        _sync(device)
        t0 = time.perf_counter()
        a @ b
        _sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * 4096 * hidden * 4 * hidden / statistics.median(times[1:]) / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---- one configuration (a child process) --------------------------------------------------------

def run_config(args, levers: dict[str, bool]) -> dict:
    """``args.steps + 1`` GRPO steps with ``levers``; train()'s rows and what the step trained on."""
    from factrl.agents.tools import RetrieverTool
    from factrl.hardware import resolve_device, use_bf16
    from factrl.llm.local import LocalLLM
    from factrl.recipes.haris import rounds as haris_rounds
    from factrl.rl.runs import grpo_params
    from factrl.rl.trainer import GRPOTrainer, train

    device = resolve_device(args.device)
    p = reasoning_params(args.profile)
    p = replace(p, steps=args.steps + 1, checkpoint_every=10**6, device=str(device))
    cfg = replace(grpo_params(p), chunked_logprobs=levers["chunked_logprobs"], group_by_length=levers["group_by_length"],
                  shared_prefix=levers["shared_prefix"], free_caches=levers["free_caches"],
                  lora_rank=int(levers.get("lora_rank", 0)))
    trained: list[int] = []

    class CountingTrainer(GRPOTrainer):
        def step(self, trajectories, rewards, group_ids):
            trained.append(len(trajectories))
            return super().step(trajectories, rewards, group_ids)

    with tempfile.TemporaryDirectory() as tmp:
        items, retriever = world(Path(tmp), args.tiny)
        policy_model, search_model, tok = models(args.tiny, device)
        trainer = CountingTrainer(policy_model, tok, cfg)
        policy = LocalLLM(model_obj=policy_model, tokenizer=tok, precision=cfg.precision, model_name="policy")
        search = LocalLLM(model_obj=search_model, tokenizer=tok, precision=cfg.precision, model_name="search",
                          memoize_greedy=levers["memoize_search"])
        tool = haris_rounds.search_agent_tool(search, RetrieverTool(retriever, k=p.top_k),
                                              haris_rounds.served_search_params(p))
        rollout_fn = haris_rounds.reasoning_rollout_fn(policy, tool, haris_rounds.reasoning_rollout_params(p))
        reward_fn = (haris_rounds.reasoning_reward_fn(p.reward, require_question=p.require_question)
                     if args.reward == "profile" else checksum_reward)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        rows = train(trainer, items, rollout_fn, reward_fn, Path(tmp) / "run",
                     after_rollouts=policy.free_memory if cfg.free_caches else policy.release,
                     on_step=lambda row: print(f"  {levers}: step {row['step']} {row['step_time']:.1f} s "
                                               f"(rollout {row['rollout_time']:.1f} s, update {row['train_time']:.1f} s)",
                                               file=sys.stderr, flush=True))
        peak = (torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)  # KiB -> GiB
        hidden = policy_model.config.hidden_size
        params = sum(x.numel() for x in policy_model.parameters())
    steps_trained = iter(trained)
    for row in rows:  # the trajectories each step trained on (0 when no group had signal)
        row["trained_trajectories"] = float(next(steps_trained) if row.get("update_tokens") else 0)
    return {"levers": levers, "rows": rows, "peak_gb": peak, "device": str(device), "bf16": use_bf16(cfg.precision, device),
            "hidden_size": hidden, "parameters": params, "group_size": cfg.group_size,
            "prompts_per_step": cfg.prompts_per_step, "max_sampling_draws": cfg.max_sampling_draws}


def summarize(run: dict) -> dict:
    """Medians over the steps after the first, in the issue's keys."""
    rows = run["rows"][1:]

    def med(key: str, default: float = 0.0) -> float:
        values = [r[key] for r in rows if key in r]
        return float(statistics.median(values)) if values else default

    engines = sorted({k[len("engine_"):-len("_decode_tokens_per_s")] for r in rows for k in r
                      if k.startswith("engine_") and k.endswith("_decode_tokens_per_s")})
    per_traj = [r["step_time"] / r["trained_trajectories"] for r in rows if r["trained_trajectories"] > 0]
    return {
        "step_s": med("step_time"), "rollout_s": med("rollout_time"), "update_s": med("train_time"),
        "trained_trajectories": med("trained_trajectories"),
        "s_per_trained_trajectory": float(statistics.median(per_traj)) if per_traj else None,
        "decode_tokens_per_s": {e: med(f"engine_{e}_decode_tokens_per_s") for e in engines},
        "decode_tokens": {e: med(f"engine_{e}_decode_tokens") for e in engines},
        "prefill_tokens": {e: med(f"engine_{e}_prefill_tokens") for e in engines},
        "mean_batch": {e: med(f"engine_{e}_mean_batch") for e in engines},
        "memo_hits": {e: med(f"engine_{e}_memo_hits") for e in engines},
        "update_tokens_per_s": med("update_tokens_per_s"), "update_pad_share": med("update_pad_share"),
        "peak_rss_gb": run["peak_gb"],
        "steps_timed": len(rows),
        "reward_means": [r["reward_mean"] for r in run["rows"]],
    }


def child(args, levers: dict[str, bool]) -> dict:
    """Run one configuration in a fresh interpreter, so its peak memory is its own."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    cmd = [sys.executable, "-m", "bench.grpo_step", "--child", json.dumps(levers), "--child-out", str(out), "--profile", args.profile,
           "--steps", str(args.steps), "--device", args.device, "--reward", args.reward] + (["--tiny"] if args.tiny else [])
    subprocess.run(cmd, check=True, cwd=Path(__file__).resolve().parents[1],
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    result = json.loads(out.read_text())
    out.unlink()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="demo", help="demo (params.yaml) or a profile name, e.g. hard")
    ap.add_argument("--steps", type=int, default=4, help="timed steps of baseline and optimized (after one warm-up)")
    ap.add_argument("--lever-steps", type=int, default=2, help="timed steps of each one-lever-off run (0: none)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny random Llamas from a config (a bare CUDA machine)")
    ap.add_argument("--reward", choices=["checksum", "profile"], default="checksum",
                    help="checksum: every group mixes (base models earn no verdict reward); profile: the stage's reward")
    ap.add_argument("--lora-rank", type=int, default=16,
                    help="also time the optimized step with LoRA adapters of this rank (0: skip)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.child_out.write_text(json.dumps(run_config(args, json.loads(args.child))))
        return

    from bench._measured import Measurement
    from factrl.hardware import resolve_device

    measured = Measurement("auto", args.device)
    all_on = dict.fromkeys(LEVERS, True)
    base = child(args, dict.fromkeys(LEVERS, False))
    opt = child(args, all_on)
    baseline, optimized = summarize(base), summarize(opt)
    levers = {}
    if args.lever_steps > 0:
        lever_args = argparse.Namespace(**{**vars(args), "steps": args.lever_steps})
        for name in LEVERS:
            off = summarize(child(lever_args, {**all_on, name: False}))
            levers[name] = {"on": True, "step_s": off["step_s"], "s_per_trained_trajectory": off["s_per_trained_trajectory"],
                            "update_s": off["update_s"], "rollout_s": off["rollout_s"], "peak_rss_gb": off["peak_rss_gb"],
                            "steps_timed": off["steps_timed"], "reward_means": off["reward_means"],
                            "meaning": "optimized with this lever alone off"}
    approximate = {}
    if args.lora_rank > 0:  # not exact (a rank-r subspace): timed here, ablated on reward curves elsewhere
        lora = summarize(child(args, {**all_on, "lora_rank": args.lora_rank}))
        approximate["lora"] = {"rank": args.lora_rank, "meaning": "optimized with LoRA adapters instead of full weights",
                               **{k: lora[k] for k in ("step_s", "rollout_s", "update_s", "s_per_trained_trajectory",
                                                       "update_tokens_per_s", "peak_rss_gb", "reward_means")}}
    device = resolve_device(args.device)
    gflops = matmul_gflops(opt["hidden_size"], opt["bf16"], device)
    firsts = [baseline["reward_means"][0], optimized["reward_means"][0]] + [v["reward_means"][0] for v in levers.values()]
    ratio = (optimized["s_per_trained_trajectory"] / baseline["s_per_trained_trajectory"]
             if optimized["s_per_trained_trajectory"] and baseline["s_per_trained_trajectory"] else None)
    ceiling = gflops * 1e9 / (6 * opt["parameters"])  # tokens/s the GEMM rate allows forward + backward
    result = {
        "profile": args.profile + (" (tiny random models)" if args.tiny else ""),
        "baseline": baseline, "optimized": optimized,
        "ratio_s_per_trajectory": ratio,
        "ratio_step_s": optimized["step_s"] / baseline["step_s"] if baseline["step_s"] else None,
        "levers": levers,
        "approximate": approximate,
        "matmul_gflops": gflops,
        "update_tokens_per_s_at_matmul_rate": ceiling,
        "update_vs_matmul": optimized["update_tokens_per_s"] / ceiling,
        "same_rollouts": len(set(firsts)) == 1,
        "commit": measured.git["commit"],
        "cpu_kind": _cpu_kind(),
        "setup": {"device": str(device), "bf16": opt["bf16"], "parameters": opt["parameters"],
                  "group_size": opt["group_size"], "prompts_per_step": opt["prompts_per_step"],
                  "max_sampling_draws": opt["max_sampling_draws"], "claims": NUM_CLAIMS,
                  "models": "tiny random Llama x2" if args.tiny else "SmolLM2-135M (policy) + SmolLM2-135M (search)",
                  "reward": args.reward,
                  "timing": "train()'s per-step rows; first step excluded; medians; each configuration in its "
                            "own process, run one after another"},
    }
    measured.write(result, args.out)
    print(json.dumps({k: result[k] for k in ("ratio_s_per_trajectory", "ratio_step_s", "same_rollouts", "matmul_gflops")}),
          json.dumps({"baseline": {k: baseline[k] for k in ("step_s", "rollout_s", "update_s", "peak_rss_gb")},
                      "optimized": {k: optimized[k] for k in ("step_s", "rollout_s", "update_s", "peak_rss_gb")}}))


def _cpu_kind() -> str:
    """``AVX512-BF16`` (native bf16), ``AVX512``, ``AVX2`` or torch's own capability name."""
    from factrl.hardware import hardware_record

    rec = hardware_record("auto", "cpu")
    cap = str(rec.get("cpu_capability", "")).upper()
    if rec.get("cpu_bf16_native") and cap.startswith("AVX512"):
        return "AVX512-BF16"
    return cap or "unknown"


if __name__ == "__main__":
    main()
