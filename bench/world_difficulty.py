"""How hard is a demo world, before any training? -> bench/results/world_difficulty.json.

For each world setting (``clean``: the default world; ``hard``: ``--hard`` knobs, or the ``hard``
profile's ``prepare.world.difficulty``), at the demo's scale and seed:

* **retrieval alone**: for every hop of every training claim, the natural first query a search
  agent writes (``<subject> <noun>``, the warm start's) and the subject alone; ``hit@1`` / ``hit@k``
  of the hop's gold passage among the real hybrid retriever's top-k (e5-nano + BM25, the demo's
  index), per hop position, and ``hit_within_2``: either query finds it (what a second search buys);
* **the warm pair** (``--models DIR`` holding ``reason_0`` and ``search_0``, e.g. a finished
  ``dvc repro warmup``): the gate figures of :mod:`factrl.rl.gate` on ``--claims`` training claims
  (balanced by label and hops), ``--group`` rollouts each at the GRPO round's temperature, each
  question answered by the warm search agent: accuracy, pass@k, all-equal group share, per hop.

The warm pair is the same for every setting, so the figures say how much room a world leaves the
agents a warm start on the clean world made. Usage:

    python -m bench.world_difficulty [--models DIR] [--claims 48] [--group 4] [--settings clean hard]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench._measured import Measurement  # noqa: E402
from factrl.config import read_params  # noqa: E402
from factrl.data.params import WorldDifficulty, WorldParams  # noqa: E402
from factrl.profiles import merge, read_profile  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "world_difficulty.json"
TOP_K = 3


def world_params(setting: str, hard: dict | None) -> WorldParams:
    """The demo's world (params.yaml's prepare.world) with ``setting``'s difficulty."""
    raw = read_params(ROOT / "params.yaml")["prepare"]["world"]
    base = WorldParams(seed=raw["seed"], num_passages=raw["num_passages"], num_claims=raw["num_claims"],
                       hops=tuple(raw["hops"]))
    if setting == "clean":
        return base
    if hard is None:
        hard = merge(read_params(ROOT / "params.yaml"), read_profile("hard"))["prepare"]["world"]["difficulty"]
    return dataclasses.replace(base, difficulty=WorldDifficulty(**hard))


def build(params: WorldParams, work: Path):
    """The world's training split and its hybrid index, as stages prepare and index make them."""
    import pyarrow.parquet as pq

    from factrl.data.splits import stratified_split
    from factrl.data.world import write_world
    from factrl.retrieval.index import Retriever, build_index

    write_world(params, work / "passages.parquet", work / "claims.parquet")
    # the claims as written (not drawn again), split as params.yaml's prepare splits them
    prepare = read_params(ROOT / "params.yaml")["prepare"]
    train = stratified_split(pq.read_table(work / "claims.parquet"), tuple(prepare["split_fractions"]),
                             prepare["seed"])["train"]
    build_index(work / "passages.parquet", work / "index", embedder="e5-nano")
    return train, Retriever(work / "index", mode="hybrid")


def retrieval_figures(train, retriever) -> dict:
    """hit@1 / hit@k of each hop's natural query and of the subject alone, per hop position."""
    from factrl.data.reference import _search_queries
    from factrl.data.world_entities import parse_hop_question

    jobs = []
    for claim in train.to_pylist():
        for pos, hop in enumerate(claim["hops"]):
            rel, subject = parse_hop_question(hop["question"])
            jobs.append((pos + 1, set(hop["passage_ids"]), _search_queries(rel, subject)))
    natural = retriever.search([q[0] for _, _, q in jobs], TOP_K)
    alone = retriever.search([q[1] for _, _, q in jobs], TOP_K)
    per = defaultdict(lambda: defaultdict(list))
    for (pos, gold, _), a, b in zip(jobs, natural, alone):
        ids_a, ids_b = [h.id for h in a], [h.id for h in b]
        for key, value in (("hit@1", ids_a[:1] and ids_a[0] in gold), (f"hit@{TOP_K}", bool(gold & set(ids_a))),
                           (f"subject_alone_hit@{TOP_K}", bool(gold & set(ids_b))),
                           ("hit_within_2", bool(gold & (set(ids_a) | set(ids_b))))):
            per[f"hop{pos}"][key].append(bool(value))
            per["all"][key].append(bool(value))
    return {pos: {k: round(sum(v) / len(v), 4) for k, v in figs.items()} | {"n": len(figs["hit@1"])}
            for pos, figs in sorted(per.items())}


def gate_figures(train, retriever, models: Path, n_claims: int, group: int, settings: dict) -> dict:
    """The warm pair's gate figures (factrl.rl.gate) on ``n_claims`` balanced training claims."""
    from factrl.agents.tools import RetrieverTool
    from factrl.data.splits import balanced_subset
    from factrl.llm.backends import load_llm
    from factrl.recipes.haris import rounds as hr
    from factrl.rl.gate import figures_by_stratum

    claims = balanced_subset(train, n_claims).to_pylist()
    reason = load_llm(str(models / "reason_0"))
    search = reason if (models / "search_0").resolve() == (models / "reason_0").resolve() \
        else load_llm(str(models / "search_0"))
    from factrl.agents import haris

    tool = hr.search_agent_tool(search, RetrieverTool(retriever, k=TOP_K),
                                haris.default_search_params(max_turns=settings["search_max_turns"],
                                                            max_new_tokens=48, max_context_tokens=2048,
                                                            max_tool_response_tokens=160, temperature=0.0))
    params = haris.default_reasoning_params(max_turns=5, max_new_tokens=96, max_context_tokens=2048,
                                            max_tool_response_tokens=160, temperature=settings["temperature"])
    t0 = time.perf_counter()
    trajs = hr.reasoning_rollout_fn(reason, tool, params)(claims, group)
    wall = time.perf_counter() - t0
    score = hr.reasoning_reward_fn()
    results = score([c for c in claims for _ in range(group)], trajs)
    overall, per_hop = figures_by_stratum(results, group, [f"{c['num_hops']}hop" for c in claims])
    questions = [t.num_tool_calls for t in trajs]
    return {"all": overall, "per_hop": per_hop,
            "questions_per_rollout": sum(questions) / len(questions), "rollout_wall_s": round(wall, 1),
            "claims": len(claims), "group": group, **settings}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--settings", nargs="+", default=["clean", "hard"])
    ap.add_argument("--hard", type=json.loads, default=None, help="difficulty knobs as JSON (default: profile hard)")
    ap.add_argument("--models", type=Path, default=None, help="directory with reason_0 and search_0 (the warm pair)")
    ap.add_argument("--claims", type=int, default=48)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--search-max-turns", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    measured = Measurement("auto")
    result = {"top_k": TOP_K, "settings": {}}
    for setting in args.settings:
        params = world_params(setting, args.hard)
        with tempfile.TemporaryDirectory(prefix=f"difficulty-{setting}-") as tmp:
            train, retriever = build(params, Path(tmp))
            entry = {"world": dataclasses.asdict(params), "retrieval": retrieval_figures(train, retriever)}
            print(setting, json.dumps(entry["retrieval"]["all"]), flush=True)
            if args.models is not None:
                entry["gate"] = gate_figures(train, retriever, args.models, args.claims, args.group,
                                             {"temperature": args.temperature,
                                              "search_max_turns": args.search_max_turns})
                print(setting, json.dumps(entry["gate"]["all"]), flush=True)
        result["settings"][setting] = entry
    measured.write(result, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
