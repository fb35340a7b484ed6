"""Kills at every stage -> the ``kills`` key of bench/results/reliability.json (issue 41).

On a copy of this repository with the tiny profile applied (src/factrl/testing/pipeline_repo.py), for every DVC
stage in dependency order: an uninterrupted ``dvc repro -s STAGE`` (the reference: its lines are the
stage's progress, its outputs' sha256 the expected result), then per kill point (one drawn in the first
third of its progress, one in the last; src/factrl/testing/stage_kills.py says how) a run SIGKILLed there and a
rerun to the end, whose outputs are hashed and compared with the reference's. The next stage runs on
the reference outputs (restored when a trial's differ), so one stage's difference does not spread.

Then a Prefect flow run (``python -m flows.pipeline``, targets ``index`` and ``curriculum``) killed mid-stage
at two points: ``dvc.lock`` must list each stage with outputs matching their recorded hashes, or not
list it (``dvc status``: no stage of the lock has changed or deleted outputs).

``--disk-only``: prepare on a full disk instead (src/factrl/testing/disk_full.py) -> the ``disk`` key.

Usage: nice -n 15 python -m bench.reliability_kills [--stages prepare,index] [--trials ...] [--seed 0] [--flow prepare:3,index:60]
       nice -n 15 python -m bench.reliability_kills --disk-only
Writes its key into bench/results/reliability.json, leaving the other keys as they are.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench._measured import Measurement  # noqa: E402
from factrl.testing import stage_kills as sk  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "reliability.json"


def disk(work: Path, out: Path, measured: Measurement) -> dict:
    """src/factrl/testing/disk_full.py's trial -> the ``disk`` key."""
    from factrl.testing.disk_full import disk_full_trial, run_prepare

    reference = sk.tiny_repo(ROOT, work / "disk-reference")
    if run_prepare(reference).returncode != 0:
        raise RuntimeError("prepare failed with space")
    got = disk_full_trial(sk.tiny_repo(ROOT, work / "disk-repo"), reference)
    got["commit"] = measured.git["commit"]
    result = json.loads(out.read_text()) if out.exists() else {}
    result["disk"] = got
    measured.write(result, out)  # the file's measured block: its latest writer's
    print(json.dumps(got, indent=1))
    return got


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", default="", help="comma-separated stage names (default: every stage)")
    ap.add_argument("--trials", default="", help="comma-separated stages to kill (default: every stage run); the "
                    "others run once, as the reference the next stages read")
    ap.add_argument("--seed", type=int, default=0, help="draws the kill points")
    ap.add_argument("--flow", default="prepare:3,index:60",
                    help="flow kills: STAGE:SECONDS after the stage starts, comma-separated ('' for none)")
    ap.add_argument("--disk-only", action="store_true", help="only the full-disk trial (the ``disk`` key)")
    ap.add_argument("--work", type=Path, default=None, help="keep the repo and logs here")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    measured = Measurement()
    rng = random.Random(args.seed)
    work = args.work or Path(tempfile.mkdtemp(prefix="factrl-kills-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.disk_only:
        return disk(work, args.out, measured)
    repo = sk.tiny_repo(ROOT, work / "repo")
    stages = args.stages.split(",") if args.stages else sk.stages_of(repo)
    flow = {}
    for point in filter(None, args.flow.split(",")):  # first: short, and on repositories of their own
        stage, after_s = point.split(":")
        name = f"flow_{stage}_{after_s}s"
        flow_repo = sk.tiny_repo(ROOT, work / f"flow-{name}")
        flow[name] = sk.kill_flow(flow_repo, stage, float(after_s), work / name)
        print(name, json.dumps(flow[name]), flush=True)
    per_stage = {}
    t0 = time.monotonic()
    to_kill = set(args.trials.split(",")) if args.trials else set(stages)
    for stage in stages:
        per_stage[stage] = sk.kill_stage(repo, stage, rng, work, trials=stage in to_kill)
        write(per_stage, flow, stages, args, measured, time.monotonic() - t0)
    return write(per_stage, flow, stages, args, measured, time.monotonic() - t0)


def write(per_stage: dict, flow: dict, stages: list[str], args, measured: Measurement, seconds: float) -> dict:
    """The ``kills`` key so far (written after every stage: a long run leaves its figures as it goes)."""
    trials = [k for s in per_stage.values() for k in s["kills"].values() if isinstance(k, dict)]
    kills = {"profile": "tiny", "seed": args.seed, "stages_planned": stages, "complete": len(per_stage) == len(stages),
             "stages": per_stage, "trials": len(trials), "identical": sum(t["identical"] for t in trials),
             "equal": sum(t["equal"] for t in trials), "resumed": sum(t["resumed"] for t in trials),
             "flow_kills": flow, "flow_half_recorded": sum(len(f["half_recorded"]) for f in flow.values()),
             "seconds": round(seconds, 1), "commit": measured.git["commit"], "measured": measured.record()}
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result["kills"] = kills
    measured.write(result, args.out)  # the file's measured block: its latest writer's
    print(json.dumps({k: v for k, v in kills.items() if k not in ("stages", "measured")}), flush=True)
    return kills


if __name__ == "__main__":
    main()
