"""M2R's curriculum against direct training, and against naive RAG -> bench/results/m2r.json.

For each of ``--seeds`` training seeds, on a small generated demo world (2- and 3-hop chains, BM25):

* ``rag``: SmolLM2-135M reads the question's top-k passages and boxes an answer (one generation);
* ``m2r_base``: the untrained model runs the M2R protocol (``factrl.agents.m2r``, full prompt);
  both answer greedily with the same model whatever the seed, so they are evaluated once;
* ``m2r_warm``: the warm-started model (``m2r.warm_start``: reference M2R trajectories of the training
  claims' gold chains, the warmup mechanism), before any GRPO;
* ``m2r_stage1``: the warm-started model after GRPO on the curriculum's stage 1 (params.yaml's
  ``curriculum`` split of the training claims, format 1: macro retrieval and key saving);
* ``m2r_stage2``: that model after GRPO on stage 2 (the other half, format 2: micro retrieval too);
* ``m2r_one_stage``: the warm-started model after GRPO on all training claims at once with format 2,
  for as many steps as both stages together (the paper's "direct optimization" ablation).

Every system answers greedily on held-out demo-world multi-hop questions (``demo``) and on the first
``--qa`` questions of ../shared/data's MuSiQue and HotpotQA samples, searched over their own passages
(BM25). Scores: exact match and token F1 against the gold answer and its aliases. ``em[dataset][system]``
and ``f1[dataset][system]`` are ``{mean, spread}`` over seeds (spread = max - min); ``per_seed`` holds the
values; ``format_failures`` counts the malformed M2R answers (scored 0, never a crash).
``no_warm_start`` repeats the two curriculum stages from the base model without the warm start
(demo only), the numbers with and without it. Training settings are params.yaml's ``m2r`` section
(``--profile`` merges a profile over it); ``--steps`` overrides the GRPO steps of each stage.

A seed takes about an hour on 2 cores. Each finished seed is kept in ``--work`` (``seed<N>.json``, with
the commit it ran at), and the results file is rewritten after every seed: a stopped run resumes
from its last finished seed with the same ``--work`` (at the same commit).

Usage: python -m bench.m2r [--seeds 3] [--held 24] [--qa 24] [--steps N] [--profile NAME] [--work DIR]
                           [--out PATH]
       python -m bench.m2r --smoke --out /tmp/m2r_smoke.json     # tiny settings, end to end in minutes
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import pyarrow as pa  # noqa: E402

from bench._measured import Measurement  # noqa: E402
from bench._world import demo_world  # noqa: E402
from factrl.config import from_dict, read_params  # noqa: E402
from factrl.data.curriculum import CurriculumParams  # noqa: E402
from factrl.data.params import WorldParams  # noqa: E402
from factrl.model_names import resolve_model  # noqa: E402
from factrl.recipes.m2r_params import M2RParams, M2RStageParams  # noqa: E402
from factrl.rl.params import SFTParams  # noqa: E402

DATASETS = ("demo", "musique", "hotpotqa")
SYSTEMS = ("rag", "m2r_base", "m2r_warm", "m2r_stage1", "m2r_stage2", "m2r_one_stage")
SHARED = ROOT.parent / "shared" / "data"


def world(root: Path) -> tuple[pa.Table, Path]:
    return demo_world(root, WorldParams(seed=21, num_passages=400, num_claims=120, hops=(2, 3)))


def split_world(claims: pa.Table, n_held: int) -> tuple[list[dict], pa.Table]:
    """Held-out QA items (the first ``n_held`` distinct questions) and the training claims: every
    claim whose question is held out stays out of training (a REFUTES twin shares its question)."""
    from factrl.data.multihop import world_items, world_question

    held = world_items(claims)[:n_held]
    questions = {it["question"] for it in held}
    rows = [c for c in claims.to_pylist() if (world_question(c) or ("",))[0] not in questions]
    return held, pa.Table.from_pylist(rows, schema=claims.schema)


def qa_set(name: str, n: int, cache: Path, shared: Path):
    """The first ``n`` questions of a shared QA sample and a BM25 retriever over its own passages."""
    from factrl.data.multihop import read_qa_jsonl
    from factrl.eval.runner import passages_index
    from factrl.retrieval.index import Retriever

    sample, passages = shared / f"{name}_sample.jsonl", shared / f"{name}_passages.jsonl"
    if not sample.exists():
        print(f"{sample} absent: {name} skipped", flush=True)
        return None
    return read_qa_jsonl(sample, limit=n), Retriever(passages_index(passages, cache), mode="bm25")


def smoke_params(p: M2RParams) -> M2RParams:
    return dataclasses.replace(p, group_size=2, prompts_per_step=1, steps=1, max_new_tokens=48, max_turns=6,
                               max_context_tokens=1536, warm_max_items=4,
                               sft=SFTParams(max_steps=1, batch_size=2, checkpoint_every=1))


def evaluate(system: str, llm, sets: dict, p: M2RParams, fmt: int = 2) -> dict:
    """EM / F1 (and M2R's format failures) of one system on every dataset."""
    from factrl.agents.m2r import MacroTool
    from factrl.recipes import m2r as recipe

    params = recipe.rollout_params(p, temperature=0.0)
    out = {}
    for name, (items, retriever) in sets.items():
        out[name] = recipe.evaluate_qa("rag" if system == "rag" else "m2r", llm, items,
                                       MacroTool(retriever, k=p.top_k), params=params, fmt=fmt)
        print(f"  {system} on {name}: EM {out[name]['em']:.3f} F1 {out[name]['f1']:.3f}"
              + (f" format failures {out[name].get('format_failures')}" if system != "rag" else ""), flush=True)
    return out


def train(items: list[dict], init: str, retriever, p: M2RParams, stage: M2RStageParams, work: Path, name: str):
    """One GRPO stage into ``work/name``; returns the model directory and the stage's record."""
    from factrl.recipes import m2r as recipe

    _, record = recipe.train_stage(items, init, retriever, p, stage, state_dir=work / f"ck_{name}",
                                   out_model=work / name, curves_dir=work / f"{name}_curves")
    return str(work / name), record


def stats(values: list[float]) -> dict:
    return {"mean": sum(values) / len(values), "spread": max(values) - min(values)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--held", type=int, default=24, help="held-out demo-world questions")
    ap.add_argument("--qa", type=int, default=24, help="MuSiQue / HotpotQA questions each")
    ap.add_argument("--steps", type=int, default=0, help="GRPO steps per curriculum stage (0 = params m2r.steps)")
    ap.add_argument("--profile", default="", help="a profiles/ name merged over params.yaml")
    ap.add_argument("--smoke", action="store_true", help="tiny settings: shows the bench runs end to end")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "m2r.json"))
    ap.add_argument("--work", type=Path, default=None, help="keeps finished seeds: rerun with it to resume")
    ap.add_argument("--shared-data", default=str(SHARED), help="where musique_* and hotpotqa_* live")
    args = ap.parse_args()

    from factrl.agents.m2r import MacroTool
    from factrl.data.curriculum import split_m2r
    from factrl.data.multihop import world_items
    from factrl.llm.local import LocalLLM
    from factrl.llm.models import cache_dir
    from factrl.profiles import merge, read_profile, write_params
    from factrl.recipes import m2r as recipe
    from factrl.retrieval.index import Retriever
    from factrl.rl.sampling import seed_everything

    raw = read_params(ROOT / "params.yaml")
    if args.profile:
        merge(raw, dict(read_profile(args.profile, ROOT / "profiles")))
    base_p: M2RParams = from_dict(M2RParams, raw.get("m2r", {}), "m2r")
    curriculum: CurriculumParams = from_dict(CurriculumParams, raw.get("curriculum", {}), "curriculum")
    base_p = dataclasses.replace(base_p, retrieval_mode="bm25")
    if args.smoke:
        base_p = smoke_params(base_p)
    if args.steps:
        base_p = dataclasses.replace(base_p, steps=args.steps)
    measured = Measurement(base_p.precision)
    work = args.work or Path(tempfile.mkdtemp(prefix="factrl-m2r-"))
    work.mkdir(parents=True, exist_ok=True)
    merged_params = write_params(raw, work / "params.yaml")  # params.yaml + the profile: model.base's home
    base = resolve_model(base_p.base_model, None, where="m2r.base_model", params_file=merged_params)
    base_p = dataclasses.replace(base_p, base_model=base)
    claims, index = world(work / "world")
    retriever = Retriever(index, mode="bm25")
    held, train_claims = split_world(claims, args.held)
    pieces = split_m2r(train_claims, curriculum.m2r_stage1_fraction, seed=curriculum.seed,
                       how=curriculum.m2r_split)
    stage_items = {name: world_items(t) for name, t in pieces.items()}
    all_items = world_items(train_claims)
    sets = {"demo": (held, retriever)}
    for name in DATASETS[1:]:
        found = qa_set(name, args.qa, cache_dir() / "m2r-bench", Path(args.shared_data))
        if found is not None:
            sets[name] = found
    stage1 = M2RStageParams(id=1, prev=0, segment="m2r_stage1", format=1)
    stage2 = M2RStageParams(id=2, prev=1, segment="m2r_stage2", format=2, start="m2r/model_1")
    one = M2RStageParams(id=3, prev=0, segment="all", format=2)
    commit = measured.git["commit"]

    def saved(name: str, compute) -> dict:
        """``compute()``'s result, kept in ``work/name.json`` (with the commit) and read back on resume."""
        path = work / f"{name}.json"
        if path.exists():
            kept = json.loads(path.read_text())
            if kept["commit"] != commit:
                raise SystemExit(f"{path} was measured at {kept['commit']}, this is {commit}: "
                                 "use another --work")
            print(f"{name}: kept from {path}", flush=True)
            return kept["result"]
        result = compute()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"commit": commit, "result": result}))
        tmp.replace(path)  # a killed run never leaves half a record
        return result

    def base_scores() -> dict:
        base = LocalLLM(base_p.base_model, precision=base_p.precision)
        return {"rag": evaluate("rag", base, sets, base_p),
                "m2r_base": evaluate("m2r_base", base, sets, base_p)}

    def one_seed(seed: int) -> dict:
        p = dataclasses.replace(base_p, seed=seed)
        started = time.perf_counter()
        seed_dir = work / f"seed{seed}"
        seed_everything(1000 + seed)
        warm_dir = seed_dir / "warm"
        warm = recipe.warm_start(all_items, p, MacroTool(retriever, k=p.top_k), state_dir=warm_dir / "sft",
                                 out_model=warm_dir / "model", curves_dir=warm_dir / "loss")
        scores = {"m2r_warm": evaluate("m2r_warm", LocalLLM(str(warm_dir / "model"), precision=p.precision),
                                       sets, p)}
        s1, r1 = train(stage_items["m2r_stage1"], str(warm_dir / "model"), retriever, p, stage1, seed_dir, "stage1")
        scores["m2r_stage1"] = evaluate("m2r_stage1", LocalLLM(s1, precision=p.precision), sets, p, fmt=1)
        s2, r2 = train(stage_items["m2r_stage2"], s1, retriever, p, stage2, seed_dir, "stage2")
        scores["m2r_stage2"] = evaluate("m2r_stage2", LocalLLM(s2, precision=p.precision), sets, p)
        p_one = dataclasses.replace(p, steps=2 * p.steps)  # the same GRPO budget as both stages together
        s3, r3 = train(all_items, str(warm_dir / "model"), retriever, p_one, one, seed_dir, "one_stage")
        scores["m2r_one_stage"] = evaluate("m2r_one_stage", LocalLLM(s3, precision=p.precision), sets, p)
        # the warm start's share: the same two stages from the base model
        c1, _ = train(stage_items["m2r_stage1"], p.base_model, retriever, p, stage1, seed_dir, "cold1")
        c2, _ = train(stage_items["m2r_stage2"], c1, retriever, p, stage2, seed_dir, "cold2")
        cold = evaluate("m2r_stage2 (no warm start)", LocalLLM(c2, precision=p.precision),
                        {"demo": sets["demo"]}, p)["demo"]
        shutil.rmtree(seed_dir, ignore_errors=True)
        return {"scores": scores, "cold": cold, "wall_s": time.perf_counter() - started,
                "training": {"warm_start": warm, "stage1": r1, "stage2": r2, "one_stage": r3}}

    untrained = saved("base", base_scores)
    per_seed: dict = {m: {d: {s: [] for s in SYSTEMS} for d in sets} for m in ("em", "f1")}
    failures: dict = {d: {s: 0 for s in SYSTEMS if s != "rag"} for d in sets}
    no_warm: dict = {"em": {"with": [], "without": []}, "f1": {"with": [], "without": []}}
    training: dict = {}
    for seed in range(args.seeds):
        print(f"seed {seed}", flush=True)
        run = saved(f"seed{seed}", lambda: one_seed(seed))  # noqa: B023  (called at once, in this iteration)
        scores = untrained | run["scores"]
        for metric in ("em", "f1"):
            no_warm[metric]["with"].append(scores["m2r_stage2"]["demo"][metric])
            no_warm[metric]["without"].append(run["cold"][metric])
            for d in sets:
                for s in SYSTEMS:
                    per_seed[metric][d][s].append(scores[s][d][metric])
        for d in sets:
            for s in SYSTEMS[1:]:
                failures[d][s] += scores[s][d].get("format_failures", 0)
        training[f"seed{seed}"] = run["training"] | {"wall_s": run["wall_s"]}
        report(per_seed, failures, no_warm, training, args, base_p, curriculum,
               {k: len(v[0]) for k, v in sets.items()}, measured, complete=seed + 1 == args.seeds)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


def report(per_seed: dict, failures: dict, no_warm: dict, training: dict, args, p: M2RParams,
           curriculum: CurriculumParams, sizes: dict, measured: Measurement, complete: bool) -> None:
    """Write what was measured so far (after every seed, so a stopped run keeps its seeds)."""
    out = {metric: {d: {s: stats(v) for s, v in by_sys.items()} for d, by_sys in by_ds.items()}
           for metric, by_ds in per_seed.items()}
    out["per_seed"] = per_seed
    out["format_failures"] = failures
    out["no_warm_start"] = {m: {k: stats(v) for k, v in d.items()} for m, d in no_warm.items()}
    demo_em = out["em"]["demo"]
    out["curriculum_beats_one_stage"] = {
        "demo_em": demo_em["m2r_stage2"]["mean"] - demo_em["m2r_one_stage"]["mean"],
        "beyond_spread": demo_em["m2r_stage2"]["mean"] - demo_em["m2r_one_stage"]["mean"]
        > max(demo_em["m2r_stage2"]["spread"], demo_em["m2r_one_stage"]["spread"])}
    out["training"] = training
    out["setup"] = {"seeds": args.seeds, "questions": sizes, "world": "400 passages, 2- and 3-hop chains, BM25",
                    "profile": args.profile or "params.yaml", "smoke": args.smoke, "m2r": dataclasses.asdict(p),
                    "curriculum": dataclasses.asdict(curriculum),
                    "rag_and_m2r_base": "greedy with the base model: evaluated once, the same for every seed",
                    "spread": "max - min over seeds", "one_stage_steps": 2 * p.steps}
    out["complete"] = complete
    out["commit"] = measured.git["commit"]
    measured.write(out, Path(args.out))
    print({d: {s: round(v["mean"], 3) for s, v in by.items()} for d, by in out["em"].items()}, flush=True)


if __name__ == "__main__":
    main()
