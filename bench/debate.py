"""SC-MAKS against majority vote, uniform vote and the best single member -> bench/results/debate.json.

On ``--claims`` label-balanced claims of each dataset of ``--datasets`` (``DATASETS``):

- ``demo``: a generated demo world (its own BM25 index; fictional entities, so held out from any
  training);
- ``fever_symmetric``: FEVER-Symmetric dev, BM25 over its evidence sentences;
- ``climate_fever``: Climate-FEVER's SUPPORTS / REFUTES claims (its NOT ENOUGH INFO and DISPUTED
  claims have no verdict in the members' label set), BM25 over its evidence sentences, the annotated
  NOT_ENOUGH_INFO sentences among them as distractors;
- ``truthfulqa``: TruthfulQA's "Q: ... A: ..." claims (each question's best answer, SUPPORTS, and best
  incorrect answer, REFUTES). The dataset ships no evidence text, so, as in the SC-MAKS paper, it is
  closed-book: the members search the FEVER-Symmetric and Climate-FEVER sentences, which hold no
  TruthfulQA answers, and the verdicts rest on what the models know.

The three real sets come from ../shared/data and are skipped (with a note) where it is absent. On each:

1. the pool of params ``debate.pool`` debates every claim (stage debate's code path) on a cold LLM
   cache, timed and with its backend calls counted per phase and per member;
2. the paper's protocol (stage fit_consensus's cross-validation: folds x seeds of stratified
   70/15/15 runs) gives, per system, ``{mean, std, ci95}`` of accuracy and weighted F1, FCR,
   hallucination rate and CAAR, and the paired t-test / Wilcoxon of SC-MAKS against each baseline;
3. every ablation (no_adversary, no_coop, fixed_agent: a new debate on the same claims, the
   unchanged calls served by the cache; uniform_vote, no_rlhf: a new fit) over the same runs,
   paired against the full system.

``latency_vs_single``: the debate's wall time over the generation time of the single member that is
most accurate on these claims (the paper's bound: 2.5); ``calls_vs_single``: backend calls likewise.
The file also records the commit, wall time, peak memory and the machine.

Usage (from the repository root): python -m bench.debate [--claims 60] [--params params.yaml] [--embedded]
[--datasets demo,fever_symmetric,...] [--no-ablations] [--smoke] [--out FILE]. Ablations run on the demo
world only. The results file's top-level keys are the first dataset's (demo's by default). The pool's
symbolic model names (``last``, ``base``, ...) resolve against the params file as in stage debate;
``--embedded`` runs every member whose model directory is missing on the embedded SmolLM2 (the
pipeline's trained checkpoints exist only after ``dvc repro``). ``--smoke`` is a minutes-long check of
the script on a few claims with tiny budgets (written to a temporary file unless ``--out`` is given).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# on a busy 2-core machine the ephemeral Prefect API needs longer than its 20 s default to start
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
# as the Makefile: no telemetry from the temporary Prefect server (the machine may have no network)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import pyarrow as pa  # noqa: E402

from bench import _world  # noqa: E402
from bench._measured import Measurement  # noqa: E402
from factrl.agents.debate import ABLATIONS as DEBATE_ABLATIONS  # noqa: E402
from factrl.config import load_section  # noqa: E402
from factrl.consensus.aggregator import ABLATIONS as CONSENSUS_ABLATIONS  # noqa: E402
from factrl.consensus.features import debate_features  # noqa: E402
from factrl.consensus.params import FitConsensusParams  # noqa: E402
from factrl.data.params import WorldParams  # noqa: E402
from factrl.data.splits import balanced_subset  # noqa: E402
from factrl.eval.stats import paired_tests  # noqa: E402
from factrl.llm.backends import open_llm  # noqa: E402
from factrl.llm.cache import DiskCache  # noqa: E402
from factrl.recipes import scmaks  # noqa: E402
from factrl.recipes.scmaks_params import DebateParams  # noqa: E402

METRICS = ("accuracy", "f1_weighted", "fcr", "hallucination_rate", "caar")
RESULTS = ROOT / "bench" / "results" / "debate.json"


def demo_world(root: Path, claims: int, seed: int = 31) -> tuple[pa.Table, Path]:
    return _world.demo_world(root, WorldParams(seed=seed, num_passages=max(400, 8 * claims),
                                               num_claims=max(2 * claims, 24), hops=(2, 3)))


SHARED_DATA = ROOT.parent / "shared" / "data"
VERDICTS = ("SUPPORTS", "REFUTES")  # the labels every member can answer with


def shared_set(claims_file: str, passage_files: tuple[str, ...], root: Path) -> tuple[pa.Table, Path] | None:
    """A claim file of ../shared/data (its SUPPORTS / REFUTES claims) and a BM25 index over the
    union of ``passage_files``; None where the data is absent."""
    from factrl.data.sources import read_claims_jsonl
    from factrl.eval.runner import passages_index

    files = [SHARED_DATA / f for f in (claims_file, *passage_files)]
    if not all(f.exists() for f in files):
        return None
    corpus = root / ("+".join(Path(f).stem for f in passage_files) + ".jsonl")
    corpus.parent.mkdir(parents=True, exist_ok=True)
    corpus.write_bytes(b"".join(f.read_bytes() for f in files[1:]))
    return read_claims_jsonl(files[0], keep_labels=VERDICTS), passages_index(corpus, root / "index")


# name -> (claim file, passage files) in ../shared/data; see the module docstring for what each measures
SHARED_SETS = {
    "fever_symmetric": ("fever_symmetric_dev.jsonl", ("fever_symmetric_passages.jsonl",)),
    "climate_fever": ("climatefever_sample.jsonl", ("climatefever_passages.jsonl",)),
    "truthfulqa": ("truthfulqa_sample.jsonl",
                   ("fever_symmetric_passages.jsonl", "climatefever_passages.jsonl")),
}
DATASETS = ("demo", *SHARED_SETS)


def load_pool(params_file: str | Path, embedded: bool) -> tuple[DebateParams, list[str]]:
    """Params ``debate`` with the pool's symbolic model names resolved as stage debate resolves them
    (``last`` is the last round's checkpoint), and with ``embedded``, :func:`embedded_pool` applied."""
    params = scmaks.resolve_pool(load_section(DebateParams, params_file), params_file)
    return embedded_pool(params) if embedded else (params, [])


def embedded_pool(params: DebateParams) -> tuple[DebateParams, list[str]]:
    """Members whose model directory is missing run on SmolLM2 instead (and say so)."""
    notes, pool = [], []
    for m in params.pool:
        missing = [k for k in ("model", "search_model")
                   if "/" in getattr(m, k) and not Path(getattr(m, k)).exists()]
        if missing:
            notes.append(f"{m.name}: {', '.join(getattr(m, k) for k in missing)} missing -> smollm2-135m")
            m = dataclasses.replace(m, **{k: "smollm2-135m" for k in missing})
        pool.append(m)
    return dataclasses.replace(params, pool=tuple(pool)), notes


def smoke(dp: DebateParams, fp: FitConsensusParams) -> tuple[DebateParams, FitConsensusParams]:
    dp = dataclasses.replace(dp, rounds=min(dp.rounds, 1), max_new_tokens=12, debate_max_tokens=24,
                             max_turns=1)
    fp = dataclasses.replace(fp, cv=dataclasses.replace(fp.cv, folds=2, seeds=(0,)),
                             reward_model=dataclasses.replace(fp.reward_model, epochs=30),
                             aggregator=dataclasses.replace(fp.aggregator, pretrain_steps=20, iterations=10))
    return dp, fp


class KeptOpen:
    """A loader for the stage's pool that opens each backend once for the whole bench: every debate
    (full, ablations, both datasets) reuses the loaded models instead of loading them again."""

    def __init__(self, stack: contextlib.ExitStack, precision: str):
        self.stack, self.precision, self.opened = stack, precision, {}

    def __call__(self, model: str, spec):
        key = (model, spec.backend, spec.base_url, spec.api_key_env)
        if key not in self.opened:
            self.opened[key] = self.stack.enter_context(open_llm(
                model, spec.backend, precision=self.precision, base_url=spec.base_url,
                api_key_env=spec.api_key_env))
        return contextlib.nullcontext(self.opened[key])


def run_debate(claims: pa.Table, retriever, dp: DebateParams, work: Path, cache: DiskCache, loader: KeptOpen
               ) -> tuple[pa.Table, dict]:
    return scmaks.debate({"train": claims}, dp, retriever=retriever, work_dir=work, cache=cache, loader=loader)


def per_run(cv: dict, system: str, metric: str) -> list[float]:
    return [r["metrics"][system][metric] for r in cv["per_run"]]


def measure(claims: pa.Table, index: Path, dp: DebateParams, fp: FitConsensusParams, work: Path,
            loader: KeptOpen, ablations: bool) -> dict:
    """Debate + cross-validation (+ every ablation) on one claim set."""
    from factrl.retrieval.index import Retriever

    retriever = Retriever(index, mode="bm25")
    dp = dataclasses.replace(dp, retrieval_mode="bm25")
    cache = DiskCache(work / "llm_cache.sqlite")  # a new, cold cache: the timed run pays every call
    turns, info = run_debate(claims, retriever, dp, work / "debate", cache, loader)
    fs = debate_features(turns)
    opening = dict(zip(fs.members, fs.member_accuracy(range(len(fs)), "opening")))
    single = max(opening, key=opening.get)
    gen = info["costs"]["generate"]["members"][single]
    cv = scmaks.cross_validate(fs, fp)
    if not cv["runs"]:
        raise SystemExit(f"{len(fs)} claims leave every test fold of the {fp.cv.fractions} protocol empty; "
                         "use more --claims")
    out = {
        "claims": len(fs), "members": fs.members, "single_member": single, "member_opening_accuracy": opening,
        # SC-MAKS votes over the final stances: a debate that talks the best member out of a right
        # verdict costs accuracy however the aggregator weighs it
        "member_final_accuracy": dict(zip(fs.members, map(float, fs.member_accuracy(range(len(fs)))))),
        "weights_mean": cv["weights_mean"],
        "accuracy": {s: cv["systems"][s]["accuracy"] for s in scmaks.SYSTEMS},
        "f1": {s: cv["systems"][s]["f1_weighted"] for s in scmaks.SYSTEMS},
        "metrics": {s: {m: cv["systems"][s][m] for m in METRICS if m in cv["systems"][s]}
                    for s in scmaks.SYSTEMS},
        "tests_vs_scmaks": cv["tests"], "runs": cv["runs"],
        "latency_vs_single": info["wall_seconds"] / max(gen["seconds"], 1e-9),
        "calls_vs_single": info["calls"]["backend"] / max(gen["calls"], 1),
        "debate": {k: info[k] for k in ("wall_seconds", "calls", "costs", "format_failures", "agreement",
                                        "summaries")},
        "ablations": {},
    }
    if not ablations:
        return out
    full = {m: per_run(cv, "scmaks", m) for m in ("accuracy", "f1_weighted")}
    for name in DEBATE_ABLATIONS:
        ablated = dataclasses.replace(dp, ablations=(name,))
        a_turns, _ = run_debate(claims, retriever, ablated, work / "debate", cache, loader)
        out["ablations"][name] = ablation_entry(scmaks.cross_validate(debate_features(a_turns), fp), full)
    for name in CONSENSUS_ABLATIONS:
        refit = scmaks.cross_validate(fs, dataclasses.replace(fp, ablations=(name,)))
        out["ablations"][name] = ablation_entry(refit, full)
    return out


def ablation_entry(cv: dict, full: dict) -> dict:
    """SC-MAKS under one ablation, and its paired difference from the full system over the same runs."""
    entry = {"accuracy": cv["systems"]["scmaks"]["accuracy"], "f1": cv["systems"]["scmaks"]["f1_weighted"]}
    for metric, key in (("accuracy", "vs_full_accuracy"), ("f1_weighted", "vs_full_f1")):
        mine = per_run(cv, "scmaks", metric)
        paired = len(mine) >= 2 and len(mine) == len(full[metric])
        entry[key] = paired_tests(mine, full[metric]) if paired else None
    return entry


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--claims", type=int, default=60, help="label-balanced claims per dataset")
    ap.add_argument("--params", default=str(ROOT / "params.yaml"),
                    help="params file whose debate and fit_consensus sections run")
    ap.add_argument("--embedded", action="store_true",
                    help="members with a missing model directory run on SmolLM2")
    ap.add_argument("--datasets", type=dataset_list, default=DATASETS,
                    help=f"comma-separated, from {','.join(DATASETS)} (default: all)")
    ap.add_argument("--no-ablations", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a few claims, tiny budgets: checks the script")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    dp, notes = load_pool(args.params, args.embedded)
    measured = Measurement(dp.precision)
    fp: FitConsensusParams = load_section(FitConsensusParams, args.params)
    if args.smoke:
        dp, fp = smoke(dp, fp)
        args.claims = min(args.claims, 12)  # the fewest that leave the 70/15/15 folds non-empty
    default_out = Path(tempfile.gettempdir()) / "debate-smoke.json" if args.smoke else RESULTS
    out_path = Path(args.out) if args.out else default_out
    work = Path(tempfile.mkdtemp(prefix="factrl-bench-debate-"))
    datasets: dict = {}
    with contextlib.ExitStack() as stack:
        loader = KeptOpen(stack, dp.precision)
        for name in args.datasets:
            data = demo_world(work / "world", args.claims) if name == "demo" else shared_set(
                *SHARED_SETS[name], work / name)
            if data is None:
                notes.append(f"{name}: skipped, its files are not in {SHARED_DATA}")
                continue
            claims, index = data
            datasets[name] = measure(balanced_subset(claims, args.claims), index, dp, fp, work / name, loader,
                                     ablations=name == "demo" and not args.no_ablations)
            # after each dataset, so a stopped run keeps what it measured
            report(datasets, dp, fp, args, notes, out_path, measured, complete=False)
    shutil.rmtree(work, ignore_errors=True)
    if not datasets:
        raise SystemExit("; ".join(notes))
    report(datasets, dp, fp, args, notes, out_path, measured, complete=True)


def dataset_list(text: str) -> tuple[str, ...]:
    """``--datasets``: comma-separated names of ``DATASETS``; an unknown name is an error naming it."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in DATASETS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown dataset(s) {unknown or [text]}; known: {', '.join(DATASETS)}")
    return names


def report(datasets: dict, dp: DebateParams, fp: FitConsensusParams, args, notes: list[str], out_path: Path,
           measured: Measurement, complete: bool) -> None:
    """Write the results so far; the top-level keys are the first dataset's (the demo world's by default)."""
    first = next(iter(datasets))
    head = datasets[first]
    mean = {s: v["mean"] for s, v in head["accuracy"].items()}
    result = {
        "dataset": first, "accuracy": head["accuracy"], "f1": head["f1"],
        "latency_vs_single": head["latency_vs_single"], "calls_vs_single": head["calls_vs_single"],
        "ablations": head["ablations"], "datasets": datasets,
        "goal": {"scmaks_matches_best_single": mean["scmaks"] >= mean["best_single"],
                 "scmaks_beats_majority_vote": mean["scmaks"] > mean["majority_vote"]},
        "commit": measured.git["commit"], "peak_rss_mib": scmaks.peak_rss_mib(),
        "setup": {"claims": args.claims, "params": str(args.params), "smoke": args.smoke, "notes": notes,
                  "pool": [dataclasses.asdict(m) for m in dp.pool], "rounds": dp.rounds,
                  "cv": dataclasses.asdict(fp.cv), "datasets": list(args.datasets),
                  "retrieval": "BM25 top-k over each dataset's own passages "
                               "(truthfulqa: closed-book, see the bench)"},
        "complete": complete,
    }
    result = measured.write(result, out_path)  # + "measured": wall time, load averages, CPU kind
    print(f"debate bench -> {out_path}: " + ", ".join(
        f"{s} {v['mean']:.3f}±{v['std']:.3f}" for s, v in result["accuracy"].items())
        + f"; latency x{result['latency_vs_single']:.2f}, calls x{result['calls_vs_single']:.2f}")


if __name__ == "__main__":
    main()
