"""Do HARIS's agents learn to verify claims on the embedded default? -> bench/results/learning.json.

Every run is the real pipeline, not a copy of it: a fresh clone of this commit (``git clone``), its
params.yaml with ``--profile`` and the run's overrides merged in, ``dvc repro`` of the last round's
``train_reason`` (prepare .. warmup .. every round), then stage ``evaluate``'s code twice:

* on the pipeline's eval split (``evaluate.per_hop`` label-balanced claims per hop setting, 60 in the
  demo) for HARIS at ``base`` / ``warm`` / ``last`` (the trained pair), RAG and the single agent,
  all on the same 135M base model;
* on the eval claims of an *unseen world* (another world seed: names and facts never trained on,
  its own passages and index, built and searched as the pipeline's) for the trained pair only: the
  agents should have learned a procedure, not a world.

Runs: one per ``--seeds`` of the main recipe (the demo profile, or ``--profile``, with
``DEMO_RECIPE``'s one change for the demo; the seed replaces ``warmup.seed``, ``synthesize.seed``
and both ``train.*.seed``; the world and the eval claims stay fixed), then one per ``--ablations``
at the first seed, each changing one thing:

* ``no_warm_start``: ``warmup.enabled: false`` (the agents start from the base model);
* ``llm_teacher``: ``synthesize.teacher.backend: local`` (SmolLM2 answers the pseudo-labels, instead
  of the world teacher reading the claim's chain);
* ``no_dynamic_sampling`` / ``dynamic_sampling``: the other value of ``train.*.dynamic_sampling``.

Keys: ``accuracy[system][hop] = {mean, spread, ci95, per_seed}`` (spread: max - min over seeds; ci95:
the bootstrap interval of the accuracy over every seed's claims pooled); ``questions_per_claim[hop]``
of ``haris_trained``; ``uniform_group_rate = {dynamic_sampling, plain}`` (mean over the reasoning
agent's GRPO steps of the share of groups whose rewards are all equal, from the runs with and
without dynamic sampling); ``ablations[name][hop]`` (trained HARIS accuracy); ``unseen_world[hop]``;
``goals`` (the issue's bars, each true or false); ``commit`` and the ``measured`` record.

What depends on the seed is evaluated per run, the rest once: HARIS base, RAG and the single agent
run the base model with ``evaluate.seed`` on a world every seed shares, so the first seed's run
evaluates them and the other runs reuse its cells (their spread is 0 by construction; listed in
``seed_independent``). An ablation evaluates only its trained pair, the one row ``ablations`` reports.

The first seed's run is a ``git clone``; every later run starts from a copy of its finished
workspace that shares its DVC cache (copy_run), so ``dvc repro`` reruns only the stages the run's
params change: a seed reruns warmup and what follows it, ``no_dynamic_sampling`` only the GRPO
round. A run whose clone already holds finished stages is resumed by DVC (``--work`` keeps the
clones; a killed run reruns only what had not finished). About 35 min per seed on 2 cores with
native bf16 and the demo profile; ``--smoke`` checks the script in minutes with the tiny profile.

Usage: python -m bench.learning [--seeds 0 1 2] [--ablations no_warm_start llm_teacher no_dynamic_sampling]
                                [--profile NAME] [--work DIR] [--smoke]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench._measured import Measurement, git_state  # noqa: E402
from factrl.config import read_params  # noqa: E402
from factrl.data.params import WorldParams  # noqa: E402
from factrl.eval.metrics import bootstrap_mean_ci  # noqa: E402
from factrl.profiles import merge, read_profile, write_params  # noqa: E402
from factrl.rl.curves import read_curve  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "learning.json"
HOPS = ("2hop", "3hop", "4hop")
SYSTEMS = {"haris_base": "HARIS (base)", "haris_warm": "HARIS (warm)", "haris_trained": "HARIS (trained)",
           "rag": "RAG", "single_agent": "Single agent"}
UNSEEN_WORLD_SEED = 101  # prepare.world.seed is 13 in the demo: a world none of the agents has seen
# the bars for trained HARIS: accuracy per hop, and points above RAG on 3- and 4-hop
GOALS = {"2hop": 0.85, "3hop": 0.75, "4hop": 0.65}
ABOVE_RAG = 0.15


# What the bench adds to the demo profile: its GRPO step draws prompts again (the config's default
# of 4 draws) where the demo's, to keep `make demo` in its budget, does not, so that
# uniform_group_rate compares dynamic sampling that can draw with plain GRPO.
DEMO_RECIPE = {"train": {"reasoning": {"max_sampling_draws": 4}}}


def seed_overrides(seed: int) -> dict:
    return {"warmup": {"seed": seed}, "synthesize": {"seed": seed},
            "train": {"search": {"seed": seed}, "reasoning": {"seed": seed}}}


def ablation_overrides(name: str) -> dict:
    if name == "no_warm_start":
        return {"warmup": {"enabled": False}}
    if name == "llm_teacher":
        return {"synthesize": {"teacher": {"backend": "local"}}}
    if name in ("no_dynamic_sampling", "dynamic_sampling"):
        on = name == "dynamic_sampling"
        return {"train": {"search": {"dynamic_sampling": on}, "reasoning": {"dynamic_sampling": on}}}
    raise SystemExit(f"unknown ablation {name!r}: "
                     "no_warm_start | llm_teacher | no_dynamic_sampling | dynamic_sampling")


def run(cmd: list[str], cwd: Path, log: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{cwd / 'src'}{os.pathsep}{cwd}"}  # the clone's code, not ROOT's
    with log.open("a") as out:
        print(f"$ {' '.join(cmd)}", file=out, flush=True)
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd} (exit {done.returncode}); see {log}")


# What a run's copy of a finished run leaves behind: that run's evaluation (evaluate() skips a
# system whose metrics file exists) and the DVC cache, which the copy shares instead.
NOT_COPIED = (".dvc/cache", ".dvc/tmp", "metrics/learning_*", "metrics/eval.json", "metrics/predictions.parquet",
              "params_*.yaml")


def copy_run(finished: Path, repo: Path) -> None:
    """``repo`` as a copy of the workspace of ``finished`` (a run of the same commit whose ``dvc
    repro`` completed), sharing its DVC cache: ``dvc repro`` in the copy then reruns only the stages
    the copy's params change (a seed: warmup on; an ablation of synthesize: synthesize on), the
    pipeline's own incremental rebuild, instead of indexing and warm-starting again. Persisted
    training checkpoints come along harmlessly: a stage resumes them only when their fingerprint
    (params, initial weights, data) is its own, and starts over otherwise.

    Written to ``repo``'s sibling ``.partial`` first, so a killed copy is never taken for a run."""
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
    """A clone of HEAD in ``work/name`` with ``params`` as its params.yaml (kept when it exists: resume).

    ``start_from``: a finished run of this commit whose workspace the new run starts from (copy_run);
    None: a fresh ``git clone``.
    """
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


def side_world(work: Path, params: dict, name: str, world: WorldParams) -> tuple[Path, Path]:
    """Claims of another world (``world``) and its index in ``work/name``: built by stage ``index``'s
    code with the pipeline's ``index`` params, so it is searched exactly as the training world's
    ``index/`` is (``evaluate.retrieval_mode``, hybrid in the demo). Kept and reused when present."""
    from factrl.data.world import write_world
    from stages import index as index_stage

    out = work / name
    claims, passages, index_dir = out / "claims.parquet", out / "passages.parquet", out / "index"
    if not claims.exists():
        out.mkdir(parents=True, exist_ok=True)
        write_world(world, passages, claims)
    if not (index_dir / "manifest.json").exists():  # build_index resumes a killed build
        write_params({"index": params["index"]}, out / "params.yaml")
        index_stage.main(str(out / "params.yaml"), passages=passages, out=index_dir)
    return claims, index_dir


def unseen_world(work: Path, params: dict) -> tuple[Path, Path]:
    """Claims of a world generated with another seed (the same size and hops), and its index
    (:func:`side_world`)."""
    world = params["prepare"]["world"]
    return side_world(work, params, f"unseen_world_s{UNSEEN_WORLD_SEED}",
                      WorldParams(seed=UNSEEN_WORLD_SEED, num_passages=world["num_passages"],
                                  num_claims=world["num_claims"], hops=tuple(world["hops"])))


def evaluate_into(repo: Path, params: dict, name: str, evaluate_section: dict, log: Path,
                  output: str = "eval.json") -> Path:
    """Stage evaluate's code on ``evaluate_section`` (over params' own) in ``repo``, its ``output``
    (a file under metrics/) kept as ``metrics/learning_<name>.<suffix>``; a kept one is not redone."""
    path = repo / f"params_{name}.yaml"
    write_params({**params, "evaluate": {**params["evaluate"], **evaluate_section}}, path)
    out = repo / "metrics" / f"learning_{name}{Path(output).suffix}"
    if not out.exists():
        run([sys.executable, "-c", f"from stages.evaluate import main; main({path.name!r})"], repo, log)
        (repo / "metrics" / output).replace(out)
    return out


def evaluate(repo: Path, params: dict, name: str, evaluate_section: dict, log: Path) -> dict:
    """Stage evaluate's code on ``evaluate_section`` (over params' own) in ``repo``; its metrics."""
    return json.loads(evaluate_into(repo, params, name, evaluate_section, log).read_text())


SEED_INDEPENDENT = ("haris_base", "rag", "single_agent")  # the base model only: the same on every seed


def one_run(work: Path, name: str, params: dict, unseen: tuple[Path, Path], log: Path, *,
            shared: dict | None = None, ablation: bool = False, start_from: Path | None = None) -> dict:
    """The pipeline, the eval split and the unseen world for one params set; per-system cells.

    ``shared``: the eval cells of a run that already evaluated the seed-independent systems (then this
    run evaluates only the warm and trained pairs and copies the rest); ``ablation``: evaluate only
    the trained pair, on the eval split (no unseen world); ``start_from``: a finished run to copy
    (clone).
    """
    repo = clone(work, name, params, start_from)
    last = max(int(k) for k in params["rounds"])
    run(["dvc", "repro", f"train_reason@{last}"], repo, log)
    base, warm, trained = ({"name": SYSTEMS[key], "reason": ckpt, "search": ckpt}
                           for key, ckpt in (("haris_base", "base"), ("haris_warm", "warm"),
                                             ("haris_trained", "last")))
    if ablation:
        section = {"systems": ["haris"], "checkpoints": [trained]}
    elif shared is not None:
        section = {"systems": ["haris"], "checkpoints": [warm, trained]}
    else:
        section = {"systems": ["haris", "rag", "single_agent"], "checkpoints": [base, warm, trained]}
    cells = evaluate(repo, params, "eval", section, log)["demo"]
    if shared is not None and not ablation:
        for hop, row in cells.items():
            row.update({SYSTEMS[key]: shared[hop][SYSTEMS[key]] for key in SEED_INDEPENDENT})
    out = {"eval": cells, "reason_metrics": [read_curve(p) for p in
                                             sorted((repo / "metrics" / "train").glob("reason_r*.csv"))]}
    if not ablation:
        unseen_claims, unseen_index = unseen
        out["unseen"] = evaluate(repo, params, "unseen", {
            "systems": ["haris"], "checkpoints": [trained],
            "sets": [{"name": "unseen", "path": str(unseen_claims), "index": str(unseen_index)}]},
            log)["unseen"]
    return out


def accuracy_cell(cells: list[dict], *, seed_independent: bool = False) -> dict:
    """{mean, spread, ci95, per_seed} of accuracy over runs' cells of one system and hop.

    ``seed_independent``: the cells are copies of one evaluation (SEED_INDEPENDENT), so the interval
    is that evaluation's alone; pooling the copies would count each claim once per seed.
    """
    accs = [c["accuracy"] for c in cells]
    correct: list[float] = []
    for c in cells[:1] if seed_independent else cells:  # n binary outcomes: the count right is enough
        k = round(c["accuracy"] * c["n"])
        correct += [1.0] * k + [0.0] * (int(c["n"]) - k)
    low, high = bootstrap_mean_ci(correct, n_boot=2000, seed=0)
    return {"mean": sum(accs) / len(accs), "spread": max(accs) - min(accs), "ci95": [low, high],
            "per_seed": accs, "n_per_seed": [int(c["n"]) for c in cells]}


def uniform_rate(runs: list[dict]) -> float | None:
    rates = [row["uniform_group_rate"] for r in runs for rows in r["reason_metrics"] for row in rows
             if "uniform_group_rate" in row]
    return sum(rates) / len(rates) if rates else None


def report(main_runs: list[dict], ablation_runs: dict[str, dict], dynamic_on: bool) -> dict:
    accuracy = {key: {hop: accuracy_cell([r["eval"][hop][label] for r in main_runs],
                                         seed_independent=key in SEED_INDEPENDENT) for hop in HOPS
                      if all(label in r["eval"].get(hop, {}) for r in main_runs)}
                for key, label in SYSTEMS.items()}
    trained = SYSTEMS["haris_trained"]
    questions = {hop: sum(r["eval"][hop][trained]["avg_questions"] for r in main_runs) / len(main_runs)
                 for hop in HOPS if hop in main_runs[0]["eval"]}
    unseen = {hop: accuracy_cell([r["unseen"][hop][trained] for r in main_runs]) for hop in HOPS
              if hop in main_runs[0]["unseen"]}
    ablations = {name: {hop: r["eval"][hop][trained]["accuracy"] for hop in HOPS if hop in r["eval"]}
                 for name, r in ablation_runs.items()}
    other = next((r for n, r in ablation_runs.items() if "dynamic_sampling" in n), None)
    rates = {("dynamic_sampling" if dynamic_on else "plain"): uniform_rate(main_runs)}
    if other is not None:
        rates["plain" if dynamic_on else "dynamic_sampling"] = uniform_rate([other])
    trained_acc, rag = accuracy.get("haris_trained", {}), accuracy.get("rag", {})
    goals = {f"trained_{hop}>={bar}": trained_acc.get(hop, {}).get("mean", 0) >= bar
             for hop, bar in GOALS.items()}
    for hop in ("3hop", "4hop"):
        if hop in trained_acc and hop in rag:
            goals[f"above_rag_{hop}_by_{ABOVE_RAG}_disjoint_ci"] = (
                trained_acc[hop]["mean"] - rag[hop]["mean"] >= ABOVE_RAG
                and trained_acc[hop]["ci95"][0] > rag[hop]["ci95"][1])
    warm = accuracy.get("haris_warm", {})
    for hop in trained_acc:
        if hop in warm:
            spread = max(trained_acc[hop]["spread"], warm[hop]["spread"])
            goals[f"rounds_beyond_spread_{hop}"] = trained_acc[hop]["mean"] - warm[hop]["mean"] > spread
    for hop, n in questions.items():
        goals[f"asks_hops_minus_1_{hop}"] = n >= int(hop[0]) - 1
    for hop, cell in unseen.items():
        if hop in trained_acc:
            goals[f"unseen_within_5pt_{hop}"] = abs(cell["mean"] - trained_acc[hop]["mean"]) <= 0.05
    return {"accuracy": accuracy, "questions_per_claim": questions, "uniform_group_rate": rates,
            "ablations": ablations, "unseen_world": {hop: c["mean"] for hop, c in unseen.items()},
            "unseen_world_detail": unseen, "goals": goals}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ablations", nargs="*", default=["no_warm_start", "llm_teacher", "no_dynamic_sampling"])
    ap.add_argument("--profile", default="", help="a profiles/ name merged over params.yaml (default: the demo)")
    ap.add_argument("--work", type=Path, default=None,
                    help="where the clones live (kept; default: a temp dir)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny profile, one seed, no ablations, a temp output")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.smoke:
        args.profile, args.seeds, args.ablations = "tiny", args.seeds[:1], []
        if args.out == RESULTS:
            args.out = Path(tempfile.mkdtemp(prefix="learning-smoke-")) / "learning.json"
    base = read_params(ROOT / "params.yaml")
    if args.profile:
        base = merge(base, dict(read_profile(args.profile, ROOT / "profiles")))
    elif not args.smoke:
        base = merge(base, DEMO_RECIPE)
    dynamic_on = bool(base["train"]["reasoning"].get("dynamic_sampling", False))
    # the ablation is the other value of dynamic_sampling, whichever the recipe uses
    ablations = [("dynamic_sampling" if a == "no_dynamic_sampling" and not dynamic_on else a)
                 for a in args.ablations]
    measured = Measurement(base["train"]["reasoning"].get("precision", "auto"))
    work = args.work or Path(tempfile.mkdtemp(prefix="factrl-learning-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "bench.log"
    unseen = unseen_world(work, base)
    main_runs: list[dict] = []
    first = work / f"seed{args.seeds[0]}"  # every later run starts from its workspace (copy_run)
    for seed in args.seeds:
        print(f"bench/learning: seed {seed} ({work})", flush=True)
        main_runs.append(one_run(work, f"seed{seed}", merge(copy.deepcopy(base), seed_overrides(seed)),
                                 unseen, log, shared=main_runs[0]["eval"] if main_runs else None,
                                 start_from=first if main_runs else None))
    ablation_runs = {}
    for name in ablations:
        print(f"bench/learning: ablation {name}", flush=True)
        params = merge(merge(copy.deepcopy(base), seed_overrides(args.seeds[0])), ablation_overrides(name))
        ablation_runs[name] = one_run(work, name, params, unseen, log, ablation=True, start_from=first)
    result = report(main_runs, ablation_runs, dynamic_on)
    result |= {"commit": measured.git["commit"], "seeds": args.seeds, "profile": args.profile or "demo",
               "per_hop": base["evaluate"].get("per_hop"),
               "unseen_world_seed": UNSEEN_WORLD_SEED, "seed_independent": list(SEED_INDEPENDENT)}
    measured.write(result, args.out)
    print(json.dumps({k: result[k] for k in ("questions_per_claim", "unseen_world", "goals")}, indent=1))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
