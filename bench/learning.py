"""What does GRPO add over the warm start on the embedded default? -> bench/results/learning.json.

Every run is the real pipeline, not a copy of it: a clone of this commit (``git clone``), its
params.yaml (the demo profile, or ``--profile``) with the run's overrides merged in, ``dvc repro`` of
the round's ``train_reason`` (prepare .. warmup .. the GRPO round, its gate included), then stage
``evaluate``'s code on:

* the eval split (``evaluate.per_hop`` label-balanced claims per hop setting: 60, over the demo's 40) for
  HARIS at ``base`` / ``warm`` / ``last`` (the trained pair) and RAG, all on the same 135M base model;
* the same claims in the held-out wording (``data/claims/heldout_wording.parquet``, a wording no
  training claim uses) for the warm and trained pairs;
* the eval claims of an *unseen world* (another world seed: names and facts never trained on, its own
  passages and index) for the warm and trained pairs.

Runs: one per ``--seeds`` (the seed replaces ``warmup.seed``, ``synthesize.seed`` and both
``train.*.seed``; the world and the eval claims stay fixed), then one per ``--ablations`` at the first
seed, each from a copy of that seed's finished workspace, so only the GRPO round reruns:

* ``flip_advantage`` / ``shuffled_reward`` / ``mask_retrieved_tokens_off``: ``train.reasoning.
  planted_defect`` (``factrl.rl.defects``): a sound pipeline's gain must vanish under the first two;
* ``no_rl``: no GRPO step for either agent (the round passes the warm pair on): the control, 0 by
  construction when evaluation is deterministic.

``--gates`` measures only each seed's gate (the warm start, the round's search step and the gate, no
reasoning step): ``gate_seed<N>.json`` records, which ``learning.json`` reads its gate from when every
seed has one (a gate of today's code beside seed records of a frozen commit; ``gate_commits`` says so).

The gain of a run is trained minus warm over the same claims (``metrics/predictions.parquet``), a
paired bootstrap; an ablation's is its trained pair against the first seed's warm pair.

Each finished run is kept as ``bench/results/learning_runs/<name>.json`` (commit it as it lands):
a rerun at the same commit skips the runs whose record exists, and ``learning.json`` is assembled
from whatever records there are (``complete`` says whether every asked run is in). Workspaces live
under ``--work`` (kept; a killed run resumes there through DVC). About 70-90 min per seed on 2 idle
AVX2 cores (fp32: the warm start, the gate, the round and six 180-claim evaluations), about 25 per
ablation; ``--smoke`` checks the script in minutes with the tiny profile.

A benchmark longer than a working session runs from a clone frozen at one commit (``git clone`` this
checkout, ``git checkout`` the commit), with the records of earlier sessions copied into the clone's
``bench/results/learning_runs/``: the clone skips them and runs the rest; its new records are copied
back and ``--assemble`` here writes ``learning.json`` (``commits`` lists the code that produced it).

Usage: python -m bench.learning [--seeds 0 1 2] [--ablations flip_advantage shuffled_reward
                                     mask_retrieved_tokens_off no_rl] [--profile NAME] [--work DIR] [--smoke]
                             [--gates] [--assemble]
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._measured import Measurement, git_state
from factrl.config import read_params
from factrl.data.params import WorldParams
from factrl.eval.metrics import bootstrap_mean_ci, paired_bootstrap_diff
from factrl.io import write_json
from factrl.profiles import merge, read_profile, write_params

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "bench" / "results" / "learning.json"
RUNS = ROOT / "bench" / "results" / "learning_runs"
HOPS = ("2hop", "3hop", "4hop")
SYSTEMS = {"haris_base": "HARIS (base)", "haris_warm": "HARIS (warm)", "haris_trained": "HARIS (trained)",
           "rag": "RAG"}
CHECKPOINTS = {"haris_base": "base", "haris_warm": "warm", "haris_trained": "last"}
SEED_INDEPENDENT = ("haris_base", "rag")  # the base model only: evaluated on the first seed's run
UNSEEN_WORLD_SEED = 101  # prepare.world.seed is 13 in the demo: a world none of the agents has seen
ABLATIONS = ("flip_advantage", "shuffled_reward", "mask_retrieved_tokens_off", "no_rl")
# what the bench adds to the profile: the gate on 32 training claims (the demo measures none)
# and 60 eval claims per hop setting (the minimum per seed; the demo evaluates 40)
# with 8 samples each (pass@8; the all-equal rate is still that of the round's groups of 4)
BENCH_RECIPE = {"train": {"reasoning": {"gate_claims": 32, "gate_samples": 8}}, "evaluate": {"per_hop": 60}}


def seed_overrides(seed: int) -> dict:
    return {"warmup": {"seed": seed}, "synthesize": {"seed": seed},
            "train": {"search": {"seed": seed}, "reasoning": {"seed": seed}}}


def ablation_overrides(name: str) -> dict:
    if name == "no_rl":
        return {"train": {"search": {"steps": 0}, "reasoning": {"steps": 0}}}
    if name in ABLATIONS:
        return {"train": {"reasoning": {"planted_defect": name}}}
    raise SystemExit(f"unknown ablation {name!r}: {' | '.join(ABLATIONS)}")


def run(cmd: list[str], cwd: Path, log: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{cwd / 'src'}{os.pathsep}{cwd}"}  # the clone's code, not ROOT's
    with log.open("a") as out:
        print(f"$ {' '.join(cmd)}", file=out, flush=True)
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd} (exit {done.returncode}); see {log}")


# What a copy of a finished run leaves behind: its evaluations and the DVC cache, which the copy shares.
NOT_COPIED = (".dvc/cache", ".dvc/tmp", "metrics/learning_*", "metrics/eval.json", "metrics/predictions.parquet",
              "params_*.yaml")


def copy_run(finished: Path, repo: Path) -> None:
    """``repo`` as a copy of the workspace of ``finished`` (a finished run of the same commit),
    sharing its DVC cache: ``dvc repro`` in the copy reruns only the stages its params change.
    Written to a ``.partial`` sibling first, so a killed copy is never taken for a run."""
    def ignore(folder: str, names: list[str]) -> set[str]:
        rel = Path(folder).relative_to(finished)
        return {n for n in names if any(fnmatch.fnmatch((rel / n).as_posix(), pat) for pat in NOT_COPIED)}

    partial = repo.with_name(repo.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(finished, partial, symlinks=True, ignore=ignore)
    subprocess.run(["dvc", "cache", "dir", "--local", str((finished / ".dvc" / "cache").resolve())],
                   cwd=partial, check=True, stdout=subprocess.DEVNULL)
    partial.rename(repo)


def clone(work: Path, name: str, params: dict, start_from: Path | None = None) -> Path:
    """A clone of HEAD in ``work/name`` with ``params`` as its params.yaml (a kept one resumes)."""
    repo = work / name
    if not (repo / ".git").exists():
        if start_from is not None:
            copy_run(start_from, repo)
        else:
            subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    head, here = git_state(ROOT)["commit"], git_state(repo)["commit"]
    if here != head:  # resuming is for a killed run of the same code, never a mix of two commits
        raise SystemExit(f"{repo} holds commit {here[:10]}, this checkout is at {head[:10]}: "
                         "use another --work directory")
    shared = ROOT.parent / "shared"  # ../shared's real claim data, as beside this checkout
    if shared.exists() and not (work / "shared").exists():
        (work / "shared").symlink_to(shared)
    write_params(params, repo / "params.yaml")
    return repo


def unseen_world(work: Path, params: dict) -> tuple[Path, Path]:
    """Claims and index of a world generated with another seed (the same size, hops and difficulty),
    built by stage ``index``'s code with the pipeline's ``index`` params; kept and reused."""
    from factrl.config import from_dict
    from factrl.data.world import write_world
    from stages import index as index_stage

    world = from_dict(WorldParams, {**params["prepare"]["world"], "seed": UNSEEN_WORLD_SEED}, "prepare.world")
    out = work / f"unseen_world_s{UNSEEN_WORLD_SEED}"
    claims, passages, index_dir = out / "claims.parquet", out / "passages.parquet", out / "index"
    if not claims.exists():
        out.mkdir(parents=True, exist_ok=True)
        write_world(world, passages, claims)
    if not (index_dir / "manifest.json").exists():  # build_index resumes a killed build
        write_params({"index": params["index"]}, out / "params.yaml")
        index_stage.main(str(out / "params.yaml"), passages=passages, out=index_dir)
    return claims, index_dir


def evaluate(repo: Path, params: dict, name: str, section: dict, log: Path) -> dict:
    """Stage evaluate's code on ``section`` (over params' own, calibration off) in ``repo``:
    ``{"metrics": eval.json, "right": dataset -> system -> claim id -> [correct, hops]}``; kept under
    ``metrics/learning_<name>.json`` so a rerun does not redo it."""
    import pyarrow.parquet as pq

    out = repo / "metrics" / f"learning_{name}.json"
    if out.exists():
        return json.loads(out.read_text())
    path = repo / f"params_{name}.yaml"
    write_params({**params, "evaluate": {**params["evaluate"], "calibration": {"method": "none"},
                                         "trace_claims": 0, **section}}, path)
    run([sys.executable, "-c", f"from stages.evaluate import main; main({path.name!r})"], repo, log)
    right: dict = {}
    for p in pq.read_table(repo / "metrics" / "predictions.parquet").to_pylist():
        right.setdefault(p["dataset"], {}).setdefault(p["system"], {})[p["claim_id"]] = [
            float(p["verdict"] == p["label"]), p["num_hops"]]
    result = {"metrics": json.loads((repo / "metrics" / "eval.json").read_text()), "right": right}
    write_json(result, out)
    return result


def checkpoint_rows(keys: list[str]) -> list[dict]:
    return [{"name": SYSTEMS[k], "reason": CHECKPOINTS[k], "search": CHECKPOINTS[k]} for k in keys]


def one_run(work: Path, name: str, params: dict, unseen: tuple[Path, Path], log: Path, *, first: bool,
            ablation: bool = False, start_from: Path | None = None) -> dict:
    """The pipeline and its evaluations for one params set -> the run's record (see the module doc)."""
    t0 = time.perf_counter()
    repo = clone(work, name, params, start_from)
    last = max(int(k) for k in params["rounds"])
    run(["dvc", "repro", f"train_reason@{last}"], repo, log)
    sets = {"demo": "data/claims/eval.parquet", "heldout_wording": "data/claims/heldout_wording.parquet"}
    if ablation:
        evals = [evaluate(repo, params, "eval", {"systems": ["haris"], "checkpoints": checkpoint_rows(
            ["haris_trained"]), "sets": [{"name": "demo", "path": sets["demo"]}]}, log)]
    else:
        systems = ["haris", "rag"] if first else ["haris"]
        keys = ["haris_base", "haris_warm", "haris_trained"] if first else ["haris_warm", "haris_trained"]
        evals = [evaluate(repo, params, "eval", {"systems": systems, "checkpoints": checkpoint_rows(keys),
                                                 "sets": [{"name": "demo", "path": sets["demo"]}]}, log)]
        if (repo / sets["heldout_wording"]).exists():
            evals.append(evaluate(repo, params, "heldout", {"systems": ["haris"], "checkpoints": checkpoint_rows(
                ["haris_warm", "haris_trained"]), "sets": [{"name": "heldout_wording", "path": sets["heldout_wording"]}]},
                log))
        claims, index = unseen
        evals.append(evaluate(repo, params, "unseen", {"systems": ["haris"], "checkpoints": checkpoint_rows(
            ["haris_warm", "haris_trained"]), "sets": [{"name": "unseen", "path": str(claims), "index": str(index)}]},
            log))
    gate_file = repo / "metrics" / "gate" / f"reason_r{last}.json"
    curves = repo / "metrics" / "train" / f"reason_r{last}" / "plots" / "metrics"
    return {"name": name, "right": {ds: by for e in evals for ds, by in e["right"].items()},
            "cells": {ds: hops for e in evals for ds, hops in e["metrics"].items()},
            "gate": json.loads(gate_file.read_text()) if gate_file.exists() else None,
            "uniform_group_rate_per_step": _curve(curves / "uniform_group_rate.tsv"),
            "reward_per_step": _curve(curves / "reward_mean.tsv"),
            "minutes": round((time.perf_counter() - t0) / 60, 1), "commit": git_state(repo)["commit"]}


def gate_run(work: Path, name: str, params: dict, log: Path) -> dict:
    """The gate alone for one params set: its pipeline up to the round's gate, no reasoning step."""
    t0 = time.perf_counter()
    params = merge(copy.deepcopy(params), {"train": {"reasoning": {"steps": 0}}})
    repo = clone(work, name, params)
    last = max(int(k) for k in params["rounds"])
    run(["dvc", "repro", f"train_reason@{last}"], repo, log)
    return {"name": name, "gate": json.loads((repo / "metrics" / "gate" / f"reason_r{last}.json").read_text()),
            "minutes": round((time.perf_counter() - t0) / 60, 1), "commit": git_state(repo)["commit"]}


def _curve(tsv: Path) -> list[float]:
    """One DVCLive curve (``step\\tvalue`` rows) as its values; [] when the run logged none."""
    if not tsv.exists():
        return []
    rows = [line.split("\t") for line in tsv.read_text().splitlines()[1:] if line.strip()]
    return [float(r[-1]) for r in rows]


# ---- assembling learning.json from the run records ------------------------------------------------

def _right(runs: list[dict], dataset: str, system: str, hop: str) -> list[list[float]]:
    """Per run, the 0/1 correctness of ``system`` on ``dataset``'s claims of ``hop`` (``pooled``: all),
    in claim-id order."""
    out = []
    for r in runs:
        by_claim = r["right"].get(dataset, {}).get(system, {})
        out.append([c for cid, (c, h) in sorted(by_claim.items()) if hop == "pooled" or f"{h}hop" == hop])
    return out


def accuracy_cell(per_run: list[list[float]]) -> dict:
    """{mean, spread, ci95, per_seed, n_per_seed} of accuracy over runs (ci95: bootstrap over every
    run's claims pooled; a seed-independent system is passed one run)."""
    accs = [sum(x) / len(x) for x in per_run]
    low, high = bootstrap_mean_ci([c for x in per_run for c in x], n_boot=2000, seed=0)
    return {"mean": sum(accs) / len(accs), "spread": max(accs) - min(accs), "ci95": [low, high],
            "per_seed": accs, "n_per_seed": [len(x) for x in per_run]}


def paired_gain(runs_a: list[dict], runs_b: list[dict], dataset: str, a: str, b: str) -> dict:
    """``a`` (in each of ``runs_a``) minus ``b`` (in the matching run of ``runs_b``) over the same claims
    of ``dataset``, pooled over hops: {mean, ci95 (paired bootstrap over every run's claims), per_seed, n}."""
    xs, ys, per_seed = [], [], []
    for ra, rb in zip(runs_a, runs_b):
        ca, cb = ra["right"].get(dataset, {}).get(a, {}), rb["right"].get(dataset, {}).get(b, {})
        ids = sorted(set(ca) & set(cb))
        if not ids:
            continue
        x, y = [ca[i][0] for i in ids], [cb[i][0] for i in ids]
        per_seed.append(sum(x) / len(x) - sum(y) / len(y))
        xs += x
        ys += y
    if not xs:
        return {}
    d = paired_bootstrap_diff(xs, ys, n_boot=2000, seed=0)
    return {"mean": d["mean"], "ci95": d["ci95"], "per_seed": per_seed, "n": d["n"]}


def report(main_runs: list[dict], ablation_runs: dict[str, dict], gate_runs: list[dict] | None = None) -> dict:
    """learning.json's figures; the gate from ``gate_runs`` (``--gates``) when given, else the main runs'."""
    first = main_runs[:1]
    warm, trained = SYSTEMS["haris_warm"], SYSTEMS["haris_trained"]
    accuracy = {key: {hop: accuracy_cell(_right(first if key in SEED_INDEPENDENT else main_runs, "demo", label, hop))
                      for hop in (*HOPS, "pooled")}
                for key, label in SYSTEMS.items() if all(_right(first, "demo", label, "pooled"))}
    heldout = {key: {hop: accuracy_cell(_right(main_runs, "heldout_wording", SYSTEMS[key], hop))
                     for hop in (*HOPS, "pooled")}
               for key in ("haris_warm", "haris_trained") if all(_right(main_runs, "heldout_wording", SYSTEMS[key], "pooled"))}
    gates = [r["gate"] for r in (gate_runs or main_runs) if r.get("gate") and r["gate"].get("claims")]
    # pass@8 where the gate drew 8 samples a claim (gate_samples); runs before it drew the round's 4
    keys = sorted({k for g in gates for k in g if k.startswith("pass_at_") and k != "pass_at_k"}) + ["uniform_group_rate"]
    gate = {k: sum(g[k] for g in gates) / len(gates) for k in keys if all(k in g for g in gates)} if gates else {}
    if gates:
        gate["samples_per_claim"] = [g.get("samples", g.get("group_size")) for g in gates]
    gain = paired_gain(main_runs, main_runs, "demo", trained, warm)
    ablations = {name: {"gain": paired_gain([r], first, "demo", trained, warm).get("mean"),
                        **{k: v for k, v in paired_gain([r], first, "demo", trained, warm).items() if k != "mean"}}
                 for name, r in ablation_runs.items()}
    questions = {hop: sum(r["cells"]["demo"][hop][trained]["avg_questions"] for r in main_runs) / len(main_runs)
                 for hop in HOPS if hop in main_runs[0]["cells"].get("demo", {})}
    out = {"accuracy": accuracy, "gain": gain, "gate": gate, "heldout_wording": heldout,
           "unseen_world_gain": paired_gain(main_runs, main_runs, "unseen", trained, warm).get("mean"),
           "unseen_world_gain_detail": paired_gain(main_runs, main_runs, "unseen", trained, warm),
           "ablations": ablations, "questions_per_claim": questions,
           "minutes_per_seed": [r["minutes"] for r in main_runs],
           "uniform_group_rate_per_step": {r["name"]: r["uniform_group_rate_per_step"] for r in main_runs},
           "reward_per_step": {r["name"]: r["reward_per_step"] for r in main_runs}}
    if gate_runs:
        out["gate_commits"] = sorted({r["commit"] for r in gate_runs})
    out["goals"] = goals(out)
    return out


def goals(r: dict) -> dict:
    """The issue's bars, each true or false (None where a figure is missing)."""
    acc, gain = r["accuracy"], r["gain"]
    trained, rag = acc.get("haris_trained", {}).get("pooled"), acc.get("rag", {}).get("pooled")
    hw = r["heldout_wording"]
    g = {
        "gain>=0.05_ci_above_0_every_seed": (gain["mean"] >= 0.05 and gain["ci95"][0] > 0
                                              and all(x > 0 for x in gain["per_seed"])) if gain else None,
        "trained>=rag+0.15": trained["mean"] >= rag["mean"] + 0.15 if trained and rag else None,
        "unseen_world_gain>0": r["unseen_world_gain"] > 0 if r["unseen_world_gain"] is not None else None,
        "heldout_trained>=warm": (hw["haris_trained"]["pooled"]["mean"] >= hw["haris_warm"]["pooled"]["mean"]
                                  if "haris_trained" in hw and "haris_warm" in hw else None),
        "uniform_group_rate<=0.5": r["gate"]["uniform_group_rate"] <= 0.5 if r["gate"] else None,
        "aim_gain>=0.10": gain["mean"] >= 0.10 if gain else None,
        "aim_trained>=rag+0.25": trained["mean"] >= rag["mean"] + 0.25 if trained and rag else None,
        "aim_unseen_world_gain>=0.05": r["unseen_world_gain"] >= 0.05 if r["unseen_world_gain"] is not None else None,
    }
    for name in ("flip_advantage", "shuffled_reward"):
        if name in r["ablations"] and r["ablations"][name].get("gain") is not None:
            g[f"{name}_gain<=0.02"] = r["ablations"][name]["gain"] <= 0.02
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ablations", nargs="*", default=list(ABLATIONS))
    ap.add_argument("--profile", default="", help="a profiles/ name merged over params.yaml (default: the demo)")
    ap.add_argument("--work", type=Path, default=None, help="where the clones live (kept; default: a temp dir)")
    ap.add_argument("--smoke", action="store_true", help="tiny profile, one seed, no ablations, a temp output")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--runs", type=Path, default=RUNS, help="where each finished run's record is kept")
    ap.add_argument("--gates", action="store_true",
                    help="measure only each seed's gate (records gate_seed<N>.json; no evaluation)")
    ap.add_argument("--assemble", action="store_true",
                    help="write learning.json from the run records there are (no run); complete: false "
                         "when some are missing")
    args = ap.parse_args()
    if args.smoke:
        args.profile, args.seeds, args.ablations = "tiny", args.seeds[:1], []
        if args.out == RESULTS:
            tmp = Path(tempfile.mkdtemp(prefix="learning-smoke-"))
            args.out, args.runs = tmp / "learning.json", tmp / "runs"
    base = merge(read_params(ROOT / "params.yaml"), BENCH_RECIPE)
    if args.profile:
        base = merge(base, dict(read_profile(args.profile, ROOT / "profiles")))
    measured = Measurement(base["train"]["reasoning"].get("precision", "auto"))
    work = args.work or Path(tempfile.mkdtemp(prefix="factrl-learning-"))
    work.mkdir(parents=True, exist_ok=True)
    args.runs.mkdir(parents=True, exist_ok=True)
    log = work / "bench.log"
    unseen = (Path(), Path()) if args.assemble or args.gates else unseen_world(work, base)
    first = work / f"seed{args.seeds[0]}"  # every later run starts from its workspace (copy_run)

    def record(name: str, run_fn=None, **kw) -> dict | None:
        path = args.runs / f"{name}.json"
        if path.exists() and (args.assemble or json.loads(path.read_text()).get("commit") == measured.git["commit"]):
            return json.loads(path.read_text())  # done at this commit (or assembling what there is): skipped
        if args.assemble:
            return None
        print(f"bench/learning: {name} ({work})", flush=True)
        rec = run_fn(work, name, log=log, **kw) if run_fn else one_run(work, name, log=log, unseen=unseen, **kw)
        write_json(rec, path)
        return rec

    gate_runs = [record(f"gate_seed{s}", run_fn=gate_run, params=merge(copy.deepcopy(base), seed_overrides(s)))
                 for s in args.seeds] if args.gates or args.assemble else []
    if args.gates:
        print(json.dumps([r["gate"] for r in gate_runs], indent=1))
        return
    main_runs = [record(f"seed{s}", params=merge(copy.deepcopy(base), seed_overrides(s)), first=i == 0,
                        start_from=first if i else None) for i, s in enumerate(args.seeds)]
    ablation_runs = {name: record(name, params=merge(merge(copy.deepcopy(base), seed_overrides(args.seeds[0])),
                                                     ablation_overrides(name)),
                                  first=False, ablation=True, start_from=first) for name in args.ablations}
    done = [r for r in main_runs if r is not None]
    if not done:
        raise SystemExit(f"no run records under {args.runs}")
    result = report(done, {n: r for n, r in ablation_runs.items() if r is not None},
                    gate_runs if gate_runs and None not in gate_runs else None)
    result |= {"commit": sorted({r["commit"] for r in done})[-1] if args.assemble else measured.git["commit"],
               "commits": sorted({r["commit"] for r in [*done, *ablation_runs.values()] if r is not None}),
               "seeds": [s for s, r in zip(args.seeds, main_runs) if r is not None], "profile": args.profile or "demo",
               "per_hop": base["evaluate"].get("per_hop"), "unseen_world_seed": UNSEEN_WORLD_SEED,
               "seed_independent": list(SEED_INDEPENDENT),
               "complete": len(done) == len(main_runs) and None not in ablation_runs.values()}
    measured.write(result, args.out)
    print(json.dumps({k: result[k] for k in ("gain", "gate", "unseen_world_gain", "goals")}, indent=1))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
