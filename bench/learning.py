"""Do the agents learn? Before vs after GRPO on held-out demo-world claims -> bench/results/learning.json.

For each of ``--seeds`` training seeds, starting from SmolLM2-135M each time:

1. the search agent L trains with the params' ``train.search`` settings (``--profile``, default the
   params.yaml demo profile) on 2-hop sub-questions of training claims, the gold sub-answer standing
   in for the teacher's pseudo answer (synthesis quality is benchmarked in bench/synthesis.py);
   ``useful_rate`` = share of held-out sub-questions whose greedy report the rule judge finds useful;
2. the reasoning agent H trains with ``train.reasoning`` on training claims, served by that L;
   measured on held-out claims: ``format_valid_rate`` and ``mean_reward`` over ``--samples`` samples
   per claim at the training temperature, and greedy ``accuracy`` (a missing verdict counts wrong).

"before" is the base model (the same for every seed except for sampling), "after" the trained one;
``spread`` is the max - min over seeds of the after - before change. ``accuracy_over_steps``
(first seed) evaluates greedy accuracy every ``--eval-every`` steps of H's training. The world is a
small generated demo world with a BM25 index, built here so the bench is self-contained.

Usage: python bench/learning.py [--seeds 3] [--claims 8] [--samples 2] [--eval-every 4] [--profile NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from factrl.config import WorldParams, from_dict, read_params  # noqa: E402
from factrl.llm.local import LocalLLM  # noqa: E402
from factrl.llm.signatures import make_judge  # noqa: E402
from factrl.rewards.haris import reasoning_reward  # noqa: E402
from factrl.recipes import haris_rounds  # noqa: E402
from _measured import Measurement  # noqa: E402


def world(root: Path, seed: int = 21) -> tuple[pa.Table, Path]:
    from factrl.data.world import write_world
    from factrl.retrieval.index import build_index

    write_world(WorldParams(seed=seed, num_passages=400, num_claims=64, hops=(2,)), root / "p.parquet",
                root / "c.parquet")
    build_index(root / "p.parquet", root / "index", embedder=None)
    return pq.read_table(root / "c.parquet"), root / "index"


def balanced_split(claims: pa.Table, n_eval: int) -> tuple[pa.Table, pa.Table]:
    """Held-out claims (label-balanced, first ``n_eval``) and the rest for training."""
    rows = claims.to_pylist()
    sup = [r for r in rows if r["label"] == "SUPPORTS"]
    ref = [r for r in rows if r["label"] != "SUPPORTS"]
    held = sup[: n_eval // 2] + ref[: n_eval - n_eval // 2]
    ids = {r["id"] for r in held}
    return pa.Table.from_pylist(held), pa.Table.from_pylist([r for r in rows if r["id"] not in ids])


def qa_from_hops(claims: pa.Table) -> pa.Table:
    rows = []
    for c in claims.to_pylist():
        for j, hop in enumerate(c["hops"]):
            rows.append({"id": f"{c['id']}-q{j}", "question": hop["question"], "answer": hop["answer"]})
    return pa.Table.from_pylist(rows)


def reasoning_scores(llm, search_llm, retriever, claims: list[dict], p, samples: int) -> dict:
    """format_valid_rate and mean_reward (sampled at the training temperature), greedy accuracy."""
    tool = haris_rounds.search_agent_tool(search_llm, haris_rounds.RetrieverTool(retriever, k=p.top_k),
                                    haris_rounds.served_search_params(p))
    sampled = haris_rounds.reasoning_rollout_fn(llm, tool, haris_rounds.reasoning_rollout_params(p))(claims, samples)
    rewards = [reasoning_reward(t.response_text, c["label"]) for c, t in
               zip([c for c in claims for _ in range(samples)], sampled)]
    greedy_params = dataclasses.replace(haris_rounds.reasoning_rollout_params(p), temperature=0.0)
    greedy = haris_rounds.reasoning_rollout_fn(llm, tool, greedy_params)(claims, 1)
    correct = [reasoning_reward(t.response_text, c["label"]).parts["correct"] for c, t in zip(claims, greedy)]
    return {"format_valid_rate": statistics.mean(float(r.format_valid) for r in rewards),
            "mean_reward": statistics.mean(r.score for r in rewards),
            "accuracy": statistics.mean(correct)}


def useful_rate(llm, retriever, questions: list[dict], p, judge) -> float:
    params = dataclasses.replace(haris_rounds.search_rollout_params(p), temperature=0.0)
    trajs = haris_rounds.search_rollout_fn(llm, haris_rounds.RetrieverTool(retriever, k=p.top_k), params)(questions, 1)
    scores = haris_rounds.search_reward_fn(judge)(questions, trajs)
    return statistics.mean(float(r.parts["useful"]) for r in scores)


def summary(before: list[float], after: list[float]) -> dict:
    deltas = [a - b for a, b in zip(after, before)]
    return {"before": statistics.mean(before), "after": statistics.mean(after),
            "spread": max(deltas) - min(deltas), "change": statistics.mean(deltas),
            "per_seed": {"before": before, "after": after}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--claims", type=int, default=8, help="held-out claims (label-balanced)")
    ap.add_argument("--samples", type=int, default=2, help="samples per held-out claim at the training temperature")
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--profile", default="", help="a profiles/ name merged over params.yaml (default: the demo)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "learning.json"))
    args = ap.parse_args()

    from factrl.config import TrainParams
    from factrl.profiles import merge, read_profile
    from factrl.retrieval.index import Retriever
    from stages.train_reason import train_reason
    from stages.train_search import train_search

    raw = read_params(ROOT / "params.yaml")
    if args.profile:
        merge(raw, dict(read_profile(args.profile, ROOT / "profiles")))
    train: TrainParams = from_dict(TrainParams, raw["train"], "train")
    sp, rp = train.search, train.reasoning
    measured = Measurement(rp.precision)
    work = Path(tempfile.mkdtemp(prefix="factrl-learning-"))
    claims, index = world(work / "world")
    retriever = Retriever(index, mode="bm25")
    sp, rp = dataclasses.replace(sp, retrieval_mode="bm25"), dataclasses.replace(rp, retrieval_mode="bm25")
    held, train_claims = balanced_split(claims, args.claims)
    held_items = haris_rounds.reasoning_items(held)
    held_questions = haris_rounds.search_items(qa_from_hops(held))[: args.claims]
    judge = make_judge("rule", threshold=sp.judge_threshold)

    base = LocalLLM("smollm2-135m", precision=rp.precision)
    results = {"useful_rate": ([], []), "format_valid_rate": ([], []), "mean_reward": ([], []), "accuracy": ([], [])}
    over_steps: list[dict] = []
    train_curves: dict[str, list] = {}
    for seed in range(args.seeds):
        seed_dir = work / f"seed{seed}"
        sps, rps = dataclasses.replace(sp, seed=seed), dataclasses.replace(rp, seed=seed)
        from factrl.rl.trainer import seed_everything

        seed_everything(1000 + seed)
        results["useful_rate"][0].append(useful_rate(base, retriever, held_questions, sps, judge))
        before = reasoning_scores(base, base, retriever, held_items, rps, args.samples)
        for k in ("format_valid_rate", "mean_reward", "accuracy"):
            results[k][0].append(before[k])

        res_s = train_search(qa_from_hops(train_claims), "smollm2-135m", retriever, sps, state_dir=seed_dir / "ck_s",
                             out_model=seed_dir / "search", metrics_path=seed_dir / "search.csv", judge=judge)
        search_llm = LocalLLM(str(seed_dir / "search"), precision=rp.precision)
        results["useful_rate"][1].append(useful_rate(search_llm, retriever, held_questions, sps, judge))

        from factrl.llm.models import load_model_and_tokenizer

        model, tok = load_model_and_tokenizer("smollm2-135m")
        probe = LocalLLM(model_obj=model, tokenizer=tok, precision=rp.precision)

        def on_step(row, seed=seed):
            if seed == 0 and row["step"] % args.eval_every == 0 and row["step"] < rps.steps:
                over_steps.append({"step": row["step"], **reasoning_scores(probe, search_llm, retriever, held_items,
                                                                           rps, 1)})

        res_r = train_reason(train_claims, "smollm2-135m", str(seed_dir / "search"), retriever, rps,
                             state_dir=seed_dir / "ck_r", out_model=seed_dir / "reason",
                             metrics_path=seed_dir / "reason.csv", search_llm=search_llm,
                             model_tokenizer=(model, tok), on_step=on_step)
        seed_everything(2000 + seed)
        after = reasoning_scores(probe, search_llm, retriever, held_items, rps, args.samples)
        for k in ("format_valid_rate", "mean_reward", "accuracy"):
            results[k][1].append(after[k])
        if seed == 0:
            over_steps.insert(0, {"step": 0, **before})
            over_steps.append({"step": rps.steps, **after})
        train_curves[f"seed{seed}"] = {
            "search_reward": [r["reward_mean"] for r in res_s.rows],
            "reason_reward": [r["reward_mean"] for r in res_r.rows],
            "reason_format_valid": [r.get("format_valid_rate") for r in res_r.rows]}
        print(f"seed {seed}: " + ", ".join(f"{k} {v[0][-1]:.3f}->{v[1][-1]:.3f}" for k, v in results.items()),
              flush=True)
        shutil.rmtree(seed_dir, ignore_errors=True)
        # written after every seed, so a long run that is stopped still leaves what it measured
        report(results, over_steps, train_curves, args, held_items, held_questions, train_claims, sp, rp,
               measured, complete=seed + 1 == args.seeds)
    shutil.rmtree(work, ignore_errors=True)


def report(results, over_steps, train_curves, args, held_items, held_questions, train_claims, sp, rp,
           measured: Measurement, complete: bool) -> None:
    out = {k: summary(*v) for k, v in results.items()}
    out["rises_beyond_spread"] = {k: out[k]["change"] > out[k]["spread"] for k in results}
    out["accuracy_over_steps"] = over_steps
    out["train_curves"] = train_curves
    out["setup"] = {
        "seeds": args.seeds, "held_out_claims": len(held_items), "held_out_questions": len(held_questions),
        "samples_per_claim": args.samples, "train_claims": train_claims.num_rows, "world": "400 passages, 2-hop",
        "profile": args.profile or "params.yaml (demo)", "search": dataclasses.asdict(sp),
        "reasoning": dataclasses.asdict(rp), "retrieval": "bm25 top-k",
        "pseudo_answers": "gold sub-answers (stand-in for the teacher)",
    }
    out["complete"] = complete
    out["seeds_done"] = len(results["accuracy"][1])
    measured.write(out, Path(args.out))
    print({k: (round(out[k]["before"], 3), round(out[k]["after"], 3), round(out[k]["spread"], 3)) for k in results})


if __name__ == "__main__":
    main()
