"""Does GRPO add to the warm start on the hard world? -> bench/results/learning_hard.json.

bench/learning.py's sibling for ``profiles/hard.yaml`` (issue 38): the same real pipeline per run (a
clone of this commit, ``dvc repro`` of the last round, then stage ``evaluate``'s code), the same
seeds and copies of the first seed's workspace (``learning.copy_run``), but scored on claims the
warm start never saw and paired over the same claims:

* the eval split of the hard world (``evaluate.per_hop`` claims per hop, 90 in the profile) for HARIS
  at ``base`` / ``warm`` / ``last`` and RAG; base and RAG once (they do not depend on the seed);
* the same eval claims in the held-out wording (``data/claims/heldout_wording.parquet``), and the
  claims along the held-out relation combination (``data/claims/heldout_combination.parquet``) when
  the world holds one out;
* an unseen world (another seed, the same knobs, its own index) and the clean world (the demo's seed
  with every knob off, its own index: the regression check), trained pair only.

Keys: ``accuracy[system][hop] = {mean, spread, ci95}`` for ``haris_base``, ``haris_warm``,
``haris_trained``, ``rag`` and hops ``2hop`` .. ``4hop`` and ``pooled``; ``gain = {mean, ci95}``:
trained minus warm pooled over hops and seeds, a paired bootstrap over the same (seed, claim) pairs;
``heldout_wording[hop]``, ``unseen_world[hop]``, ``clean_world[hop]``, ``heldout_combination[hop]`` (trained); ``uniform_group_rate``
(the reasoning rounds' mean share of all-equal groups); ``retrieval_hit_at_k`` (the natural first
query per hop position, bench/world_difficulty.py's figures on the run's world); ``ablations[name][hop]``;
``goals`` (the issue's bars); ``commit``.

Usage: python -m bench.learning_hard [--seeds 0 1 2] [--ablations no_dynamic_sampling] [--work DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench import learning  # the clones, the runs, the seed and ablation overrides  # noqa: E402
from bench._measured import Measurement  # noqa: E402
from bench.learning import ablation_overrides, clone, run, seed_overrides  # noqa: E402
from factrl.config import read_params  # noqa: E402
from factrl.data.params import WorldDifficulty, WorldParams  # noqa: E402
from factrl.eval.metrics import bootstrap_mean_ci, paired_bootstrap_diff  # noqa: E402
from factrl.profiles import merge, read_profile  # noqa: E402
from factrl.rl.curves import read_curve  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "learning_hard.json"
HOPS = ("2hop", "3hop", "4hop")
SYSTEMS = {"haris_base": "HARIS (base)", "haris_warm": "HARIS (warm)", "haris_trained": "HARIS (trained)",
           "rag": "RAG"}
SEED_INDEPENDENT = ("haris_base", "rag")
UNSEEN_WORLD_SEED = learning.UNSEEN_WORLD_SEED


def side_world(work: Path, params: dict, name: str, world: WorldParams) -> dict:
    """An eval set of another world: its claims and its own index (``learning.side_world``)."""
    claims, index_dir = learning.side_world(work, params, name, world)
    return {"name": name, "path": str(claims), "index": str(index_dir)}


def world_of(params: dict, seed: int | None = None, clean: bool = False) -> WorldParams:
    raw = params["prepare"]["world"]
    difficulty = WorldDifficulty() if clean else WorldDifficulty(**raw.get("difficulty", {}))
    return WorldParams(seed=raw["seed"] if seed is None else seed, num_passages=raw["num_passages"],
                       num_claims=raw["num_claims"], hops=tuple(raw["hops"]), difficulty=difficulty)


def evaluate(repo: Path, params: dict, name: str, section: dict, log: Path) -> list[dict]:
    """Stage evaluate's code on ``section`` (over params' own) in ``repo``: every claim's verdicts."""
    import pyarrow.parquet as pq

    return pq.read_table(learning.evaluate_into(repo, params, name, section, log, "predictions.parquet")).to_pylist()


def one_run(work: Path, name: str, params: dict, side: list[dict], log: Path, *, first: bool,
            ablation: bool = False, start_from: Path | None = None) -> dict:
    repo = clone(work, name, params, start_from)
    last = max(int(k) for k in params["rounds"])
    run(["dvc", "repro", f"train_reason@{last}"], repo, log)
    rows = {key: {"name": SYSTEMS[key], "reason": ckpt, "search": ckpt}
            for key, ckpt in (("haris_base", "base"), ("haris_warm", "warm"), ("haris_trained", "last"))}
    sets = [{"name": "demo", "path": "data/claims/eval.parquet"}]
    if ablation:
        section = {"systems": ["haris"], "checkpoints": [rows["haris_trained"]], "sets": sets}
    else:
        sets.append({"name": "heldout_wording", "path": "data/claims/heldout_wording.parquet"})
        if params["prepare"]["world"].get("difficulty", {}).get("heldout_combination"):
            sets.append({"name": "heldout_combination", "path": "data/claims/heldout_combination.parquet"})
        checkpoints = [rows["haris_base"], rows["haris_warm"], rows["haris_trained"]] if first \
            else [rows["haris_warm"], rows["haris_trained"]]
        section = {"systems": ["haris", "rag"] if first else ["haris"], "checkpoints": checkpoints, "sets": sets}
    preds = evaluate(repo, params, "eval", section, log)
    if not ablation:
        preds += evaluate(repo, params, "side", {"systems": ["haris"], "checkpoints": [rows["haris_trained"]],
                                                 "sets": side}, log)
    curves = [read_curve(p) for p in sorted((repo / "metrics" / "train").glob("reason_r*.csv"))]
    return {"predictions": preds, "reason_metrics": curves, "repo": str(repo)}


def _right(preds: list[dict], dataset: str, system: str) -> dict[str, tuple[float, str]]:
    return {p["claim_id"]: (float(p["verdict"] == p["label"]), f"{p['num_hops']}hop") for p in preds
            if p["dataset"] == dataset and p["system"] == system}


def accuracy_cells(per_run: list[dict[str, tuple[float, str]]]) -> dict:
    """{hop: {mean, spread, ci95, per_seed}} with ``pooled`` over hops, from each run's claim scores."""
    out = {}
    for hop in HOPS + ("pooled",):
        runs = [[s for s, h in r.values() if hop in ("pooled", h)] for r in per_run]
        if not all(runs):
            continue
        accs = [sum(x) / len(x) for x in runs]
        low, high = bootstrap_mean_ci([s for x in runs for s in x], n_boot=2000, seed=0)
        out[hop] = {"mean": sum(accs) / len(accs), "spread": max(accs) - min(accs), "ci95": [low, high],
                    "per_seed": accs, "n_per_seed": [len(x) for x in runs]}
    return out


def report(main_runs: list[dict], ablations: dict[str, dict]) -> dict:
    first = main_runs[0]["predictions"]
    accuracy = {}
    for key, label in SYSTEMS.items():
        runs = [first] if key in SEED_INDEPENDENT else [r["predictions"] for r in main_runs]
        scores = [_right(p, "demo", label) for p in runs]
        if all(scores):
            accuracy[key] = accuracy_cells(scores)
    trained, warm = SYSTEMS["haris_trained"], SYSTEMS["haris_warm"]
    pairs_a, pairs_b = [], []
    for r in main_runs:
        a, b = _right(r["predictions"], "demo", trained), _right(r["predictions"], "demo", warm)
        for cid in sorted(set(a) & set(b)):
            pairs_a.append(a[cid][0])
            pairs_b.append(b[cid][0])
    gain = paired_bootstrap_diff(pairs_a, pairs_b, n_boot=2000, seed=0) if pairs_a else None

    def trained_on(dataset: str) -> dict:
        cells = accuracy_cells([_right(r["predictions"], dataset, trained) for r in main_runs])
        return {hop: c["mean"] for hop, c in cells.items()}

    rates = [row["uniform_group_rate"] for r in main_runs for rows in r["reason_metrics"] for row in rows
             if "uniform_group_rate" in row]
    result = {
        "accuracy": accuracy, "gain": gain,
        "heldout_wording": trained_on("heldout_wording"), "unseen_world": trained_on("unseen_world"),
        "clean_world": trained_on("clean_world"), "heldout_combination": trained_on("heldout_combination"),
        "uniform_group_rate": sum(rates) / len(rates) if rates else None,
        "ablations": {name: {hop: c["mean"] for hop, c in accuracy_cells(
            [_right(r["predictions"], "demo", trained)]).items()} for name, r in ablations.items()},
    }
    t, w, rag = (accuracy.get(k, {}).get("pooled", {}).get("mean") for k in ("haris_trained", "haris_warm", "rag"))
    ind = t or 0.0
    result["goals"] = {
        "warm_pooled<=0.80": w is not None and w <= 0.80,
        "gain>=0.10_ci_above_0": bool(gain) and gain["mean"] >= 0.10 and gain["ci95"][0] > 0,
        "trained_pooled>=0.80": ind >= 0.80,
        "trained>=rag+0.20": rag is not None and ind >= rag + 0.20,
        "heldout_wording_within_5pt": abs(result["heldout_wording"].get("pooled", 0) - ind) <= 0.05,
        "unseen_world_within_5pt": abs(result["unseen_world"].get("pooled", 0) - ind) <= 0.05,
        "clean_world>=0.95": result["clean_world"].get("pooled", 0) >= 0.95,
        "uniform_group_rate<=0.5": result["uniform_group_rate"] is not None and result["uniform_group_rate"] <= 0.5,
    }
    return result


def variant_accuracy(predictions: list[dict], world: WorldParams, dataset: str = "demo") -> dict:
    """Accuracy of each system on the claims of each kind (``near_miss``, ``start_namesake``,
    ``wording_<w>``, ``clean``, and their complements): where the errors are. The variants are
    recomputed from the world's params (the generator is deterministic)."""
    from factrl.data.world_claims import generate_claims_with_variants

    variants = {v["id"]: v for v in generate_claims_with_variants(world)[1] or []}
    cells: dict = {}
    for p in predictions:
        v = variants.get(p["claim_id"])
        if p["dataset"] != dataset or v is None:
            continue
        kinds = [f"wording_{v['wording']}", "clean" if v["clean"] else "not_clean",
                 "near_miss" if v["near_miss"] else ("refutes_far" if p["label"] == "REFUTES" else "supports"),
                 "start_namesake" if v["start_namesake"] else "start_unique"]
        for kind in kinds:
            cell = cells.setdefault(p["system"], {}).setdefault(kind, [0, 0])
            cell[0] += p["verdict"] == p["label"]
            cell[1] += 1
    return {system: {kind: {"accuracy": right / n, "n": n} for kind, (right, n) in sorted(by.items())}
            for system, by in cells.items()}


def retrieval_hit_at_k(repo: Path) -> dict:
    """bench/world_difficulty.py's retrieval figures on the run's own training split and index."""
    import pyarrow.parquet as pq
    from world_difficulty import retrieval_figures

    from factrl.retrieval.index import Retriever

    return retrieval_figures(pq.read_table(repo / "data" / "claims" / "train.parquet"),
                             Retriever(repo / "index", mode="hybrid"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ablations", nargs="*", default=["no_dynamic_sampling"])
    ap.add_argument("--profile", default="hard")
    ap.add_argument("--work", type=Path, default=None, help="where the clones live (kept; default: a temp dir)")
    ap.add_argument("--smoke", action="store_true", help="tiny profile with the hard knobs, one seed, no ablations")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    base = merge(read_params(ROOT / "params.yaml"), dict(read_profile(args.profile, ROOT / "profiles")))
    if args.smoke:
        hard = copy.deepcopy(base["prepare"]["world"]["difficulty"])
        base = merge(base, dict(read_profile("tiny", ROOT / "profiles")))
        base["prepare"]["world"]["difficulty"] = hard
        base["evaluate"]["per_hop"] = 4
        args.seeds, args.ablations = args.seeds[:1], []
        if args.out == RESULTS:
            args.out = Path(tempfile.mkdtemp(prefix="learning-hard-smoke-")) / "learning_hard.json"
    measured = Measurement(base["train"]["reasoning"].get("precision", "auto"))
    work = args.work or Path(tempfile.mkdtemp(prefix="factrl-learning-hard-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "bench.log"
    side = [side_world(work, base, "unseen_world", world_of(base, seed=UNSEEN_WORLD_SEED)),
            side_world(work, base, "clean_world", world_of(base, clean=True))]
    main_runs: list[dict] = []
    first = work / f"seed{args.seeds[0]}"
    for k, seed in enumerate(args.seeds):
        print(f"bench/learning_hard: seed {seed} ({work})", flush=True)
        main_runs.append(one_run(work, f"seed{seed}", merge(copy.deepcopy(base), seed_overrides(seed)), side, log,
                                 first=k == 0, start_from=first if k else None))
    ablations = {}
    for name in args.ablations:
        print(f"bench/learning_hard: ablation {name}", flush=True)
        params = merge(merge(copy.deepcopy(base), seed_overrides(args.seeds[0])), ablation_overrides(name))
        ablations[name] = one_run(work, name, params, side, log, first=False, ablation=True, start_from=first)
    result = report(main_runs, ablations)
    result["by_variant"] = variant_accuracy(main_runs[0]["predictions"], world_of(base))
    result |= {"retrieval_hit_at_k": retrieval_hit_at_k(first), "commit": measured.git["commit"],
               "seeds": args.seeds, "profile": args.profile, "per_hop": base["evaluate"].get("per_hop"),
               "world": dataclasses.asdict(world_of(base)), "unseen_world_seed": UNSEEN_WORLD_SEED,
               "seed_independent": list(SEED_INDEPENDENT)}
    measured.write(result, args.out)
    print(json.dumps({k: result[k] for k in ("gain", "goals")}, indent=1))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
