"""Does MARCH cut hallucinated numbers? Before vs after joint training, 3 seeds -> bench/results/march.json.

For each seed the run of stage ``train_march`` (``factrl.recipes.march.run``, params.yaml's
``train_march`` section unless ``--set`` overrides keys) draws numeric questions from its demo world,
evaluates the starting policy greedily on the held-out ones, trains with GRPO on the solver's and the
checker's trajectories, and evaluates again; once with the warm start (the issue's path: reference
episodes of all three roles first) and once without it (``--no-baseline`` skips the second).

Keys (issue 20): ``hallucination_rate`` and ``accuracy`` = ``{before, after, spread}``: the means over
seeds and, in ``spread``, each one's 95% Student-t interval over the seeds plus that of the after -
before change; ``proposals_per_answer``: the mean proposer pairs per answer at each training step
(averaged over seeds; a policy hacking ZTR proposes fewer); ``commit``. The same keys for the run
without the warm start are under ``without_warmup``; ``per_seed`` holds every run's results file
(format failures by role, wall time, peak memory). Goal: hallucination rate at least halved, accuracy
not lower, proposals per answer not falling.

Usage: python -m bench.march [--seeds 0 1 2] [--no-baseline] [--set key=value ...] [--out PATH]
Smoke run: python -m bench.march --seeds 0 --set steps=1 num_questions=6 held_out=2 \
    warmup_sft.max_steps=1 --out /tmp/march.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import yaml  # noqa: E402

from bench._measured import Measurement  # noqa: E402
from factrl.config import from_dict, read_params  # noqa: E402
from factrl.eval.stats import summary  # noqa: E402
from factrl.io import write_json  # noqa: E402
from factrl.model_names import resolve_model  # noqa: E402
from factrl.profiles import merge  # noqa: E402
from factrl.recipes import march  # noqa: E402
from factrl.recipes.march_params import TrainMarchParams  # noqa: E402

METRICS = ("hallucination_rate", "accuracy")


def overrides(pairs: list[str]) -> dict:
    """``["steps=2", "warmup_sft.max_steps=1"]`` -> a nested mapping (values parsed as YAML)."""
    out: dict = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if not _:
            raise SystemExit(f"--set {pair!r}: expected key=value")
        node = out
        *parents, leaf = key.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = yaml.safe_load(value)
    return out


def _mean(values: list[float | None]) -> float | None:
    """The mean of the seeds that had such questions (None where none had)."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def aggregate(runs: list[dict]) -> dict:
    """The issue's keys over the seeds' results."""
    out: dict = {}
    for key in METRICS:
        before = [r["before"][key] for r in runs]
        after = [r["after"][key] for r in runs]
        out[key] = {"before": summary(before)["mean"], "after": summary(after)["mean"],
                    "spread": {"before": summary(before)["ci95"], "after": summary(after)["ci95"],
                               "change": summary([a - b for a, b in zip(after, before)])["ci95"], "seeds": len(runs)}}
    curves = [r["training"]["proposals_per_answer"] for r in runs]
    steps = min(len(c) for c in curves)
    out["proposals_per_answer"] = [sum(c[i] for c in curves) / len(curves) for i in range(steps)]
    out["proposals_per_answer_held_out"] = {
        "before": summary([r["before"]["proposals_per_answer"] for r in runs])["mean"],
        "after": summary([r["after"]["proposals_per_answer"] for r in runs])["mean"]}
    # on answerable and unanswerable questions apart (train_march.unanswerable), where the runs have them
    for key in ("hallucination_by_kind", "accuracy_by_kind"):
        if all(key in r["before"] for r in runs):
            out[key] = {kind: {when: _mean([r[when][key][kind] for r in runs])
                               for when in ("before", "after")}
                        for kind in ("answerable", "unanswerable")}
    h, a = out["hallucination_rate"], out["accuracy"]
    half = len(out["proposals_per_answer"]) // 2
    first, last = out["proposals_per_answer"][:max(half, 1)], out["proposals_per_answer"][half:]
    # halving needs something to halve: a policy that never hallucinated before training has not
    # met the goal by staying at 0 (before == 0 is reported, not counted as a pass)
    out["goal"] = {"hallucination_halved": h["before"] > 0 and h["after"] <= h["before"] / 2,
                   "hallucination_before_is_zero": h["before"] == 0,
                   "accuracy_not_lower": a["after"] >= a["before"],
                   "proposals_not_falling": sum(last) / max(len(last), 1) >= sum(first) / max(len(first), 1)}
    return out


def reaggregate(path: Path) -> None:
    """Rewrite the summaries of an existing results file from its ``per_seed`` runs, after a change
    to :func:`aggregate`; the runs, ``commit`` and ``measured`` stay those of the run that made them."""
    result = json.loads(path.read_text())
    result |= aggregate(result["per_seed"]["warmup"])
    if "without_warmup" in result["per_seed"]:
        result["without_warmup"] = aggregate(result["per_seed"]["without_warmup"])
    write_json(result, path)
    print(f"bench/march: re-aggregated {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--no-baseline", action="store_true", help="skip the runs without the warm start")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override train_march keys")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "march.json"))
    ap.add_argument("--reaggregate", action="store_true",
                    help="recompute the summary keys of --out from its per_seed runs (no model call)")
    args = ap.parse_args()
    if args.reaggregate:
        reaggregate(Path(args.out))
        return
    raw = merge(dict(read_params(ROOT / "params.yaml").get("train_march") or {}), overrides(args.set))
    params: TrainMarchParams = from_dict(TrainMarchParams, raw, "params.yaml:train_march (with --set)")
    march.check_params(params)
    base = resolve_model(params.base_model, None, where="train_march.base_model",
                         params_file=ROOT / "params.yaml")
    params = dataclasses.replace(params, base_model=base)
    measured = Measurement(params.precision)
    variants = {"warmup": True} if args.no_baseline else {"warmup": True, "without_warmup": False}
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-march-") as tmp:
        for name, warm in variants.items():
            for seed in args.seeds:
                run_dir = Path(tmp) / f"{name}_s{seed}"
                p = march.run_params(dataclasses.replace(params, warmup=warm), seed)
                print(f"bench/march: {name}, seed {seed}", flush=True)
                runs.setdefault(name, []).append(march.run(
                    p, state_dir=run_dir / "state", out_model=run_dir / "model", curves_dir=run_dir / "curves"))
    result = aggregate(runs["warmup"])
    if "without_warmup" in runs:
        result["without_warmup"] = aggregate(runs["without_warmup"])
    result |= {"commit": measured.git["commit"], "seeds": args.seeds,
               "settings": {k: v for k, v in dataclasses.asdict(params).items() if k != "seeds"},
               "per_seed": {name: [{k: v for k, v in r.items() if k != "hardware"} for r in rs]
                            for name, rs in runs.items()}}
    measured.write(result, Path(args.out))
    print(f"bench/march: wrote {args.out}")


if __name__ == "__main__":
    main()
