"""When the verifier says it does not know: NOT ENOUGH INFO on in-corpus and out-of-corpus claims (issue 49).

    python -m bench.abstain --workspace DIR [--per-hop 60] [--out-of-corpus 150] [--checkpoint last]
    python -m bench.abstain --workspace /tmp/ws --build-demo --checkpoint base --per-hop 4 --out-of-corpus 12 \\
        --mode bm25 --out bench/results/abstain_smoke_base.json     # a smoke run on the base model

``--workspace``: a ``dvc repro``'d checkout (models/, index/, data/claims/); ``--build-demo`` first writes the
demo world's claims and a BM25 index there when it has none (no trained models: name ``--checkpoint base``).
HARIS at one checkpoint pair (``last`` = the trained pair of params ``rounds``) runs on

* a **dev mix**: ``--dev-per-hop`` dev claims per hop plus half of ``--out-of-corpus`` other out-of-corpus
  claims (generated and real, ``factrl.data.out_of_corpus``, labelled NOT ENOUGH INFO): the calibration
  map is fitted there ("after", ``--method``, by default ``grounded``: the raw score and the run's evidence;
  "before" is a temperature map fitted on the in-corpus dev claims alone, as evaluate fitted it until
  issue 49), and the NOT ENOUGH INFO rules are chosen there
  (``factrl.agents.abstain.choose_rules``: the best utility on the mix, an abstention scored above a wrong
  verdict, among the combinations answering at
  least ``--min-coverage`` of its in-corpus claims);
* a **test mix**: ``--per-hop`` eval claims per hop and ``--out-of-corpus`` out-of-corpus claims (half
  generated, half real, other seeds than the dev mix's), scored with the chosen rules and the "after" map.

Each of the four runs (dev in / out of corpus, test in / out of corpus) is kept in
``WORKSPACE/.bench-abstain/<key>/<phase>-<size>.pkl`` as it finishes (the key: the pair and every argument
that changes a run; the size: of that phase's claim set), so a killed bench rerun with the same arguments
skips the runs already done; the log says how long each took.

``bench/results/abstain.json``: ``in_corpus`` {coverage, accuracy_answered, accuracy_all},
``out_of_corpus`` {nei_rate, n}, ``risk_coverage`` (points), ``ece`` {before, after} on the test mix,
``rules`` (the chosen params and, per rule, how many out-of-corpus claims it turned to NOT ENOUGH INFO),
``commit``, and ``measured`` (load, CPU kind; ``bench._measured``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import pickle
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench._measured import ROOT, Measurement, git_state

RESULTS = ROOT / "bench/results/abstain.json"
BEFORE_METHOD = "temperature"  # the map evaluate fitted until issue 49: raw score only, in-corpus dev claims
SHARED = ROOT.parent / "shared" / "data"
REAL_FILES = ("fever_symmetric_dev.jsonl", "climatefever_sample.jsonl", "hover_dev_sample.jsonl")

log = logging.getLogger("bench.abstain")


def build_demo_workspace(workspace: Path) -> None:
    """The demo world's claims split as ``prepare`` splits them (data/claims/{dev,eval}.parquet) and its
    BM25 index (index/), for a run without a ``dvc repro``'d checkout (a smoke run on the base model)."""
    from bench._world import demo_world
    from factrl.data.params import PrepareParams
    from factrl.data.splits import stratified_split
    from factrl.io import write_parquet

    if (workspace / "index" / "manifest.json").is_file():
        return
    prepare = PrepareParams()
    claims, index = demo_world(workspace / "world", prepare.world)
    index.rename(workspace / "index")
    from factrl.data.schemas import CLAIMS

    for name, table in stratified_split(claims, prepare.split_fractions, prepare.seed).items():
        write_parquet(table, workspace / "data" / "claims" / f"{name}.parquet", CLAIMS)


def sampled(path: Path, per_hop: int, seed: int) -> pa.Table:
    """``per_hop`` claims per hop of a claim file, balanced labels (as evaluate samples)."""
    from factrl.eval.runner import EvalSet, sample_set

    return sample_set(EvalSet(path.name, pq.read_table(path), None), per_hop, seed)


def run_claims(system, claims: pa.Table, retriever, batch_size: int) -> list[dict]:
    """One row per claim: label, verdict, raw confidence and the run's grounding."""
    from factrl.eval.systems import run_system

    runs = run_system(system, claims.column("claim").to_pylist(), retriever, batch_size)
    return [{"claim": c, "label": y, "verdict": r.verdict, "raw": r.raw_confidence, "grounding": r.grounding}
            for c, y, r in zip(claims.column("claim").to_pylist(), claims.column("label").to_pylist(), runs)]


class PhaseStore:
    """The rows of each finished run of the bench, by phase name, under ``directory`` (see the module
    docstring): :meth:`rows` returns the kept rows of a phase or runs it and keeps them."""

    def __init__(self, directory: Path):
        self.directory = directory

    def rows(self, phase: str, run) -> list[dict]:
        path = self.directory / f"{phase}.pkl"
        if path.is_file():
            rows = pickle.loads(path.read_bytes())
            log.info("%s: %d claims kept from an earlier run (%s)", phase, len(rows), path)
            return rows
        from factrl.io import atomic_path

        started = time.perf_counter()
        rows = run()
        with atomic_path(path) as tmp:  # whole or absent: a kill leaves no half-written phase
            tmp.write_bytes(pickle.dumps(rows))
        log.info("%s: %d claims in %.0f s", phase, len(rows), time.perf_counter() - started)
        return rows


# each phase's claim set, by the argument that sizes it
PHASE_SIZES = {"dev_in_corpus": "dev_per_hop", "dev_out_of_corpus": "out_of_corpus", "test_in_corpus": "per_hop",
               "test_out_of_corpus": "out_of_corpus"}


def phase_name(phase: str, args: argparse.Namespace) -> str:
    """``dev_in_corpus-20``: the phase and the size of its claim set."""
    return f"{phase}-{getattr(args, PHASE_SIZES[phase])}"


def phase_key(specs: list[str], args: argparse.Namespace, mode: str) -> str:
    """What makes every run's rows differ: the pair and the run's arguments, but not ``--out`` or
    ``--smoke``, nor ``--method`` or ``--min-coverage`` (they only read the rows: a rerun with another
    map or rule choice runs no model), nor the sizes of the four claim sets, which name each phase's
    file instead (:func:`phase_name`: a larger dev set reruns only the dev claims)."""
    what = {"specs": specs, "mode": mode, **{k: v for k, v in sorted(vars(args).items())
                                              if k not in ("out", "smoke", "workspace", "build_demo", "method",
                                                           "min_coverage", *PHASE_SIZES.values())}}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:12]


def fit_map(rows: list[dict], method: str):
    """A calibration map of raw confidence (and, for a ``grounded`` map, the run's evidence) -> P(verdict
    right) over ``rows``."""
    from factrl.eval.calibration import Calibrator

    return Calibrator(method).fit([r["raw"] for r in rows], [r["verdict"] == r["label"] for r in rows],
                                  features=[r["grounding"] for r in rows])


def calibrated(rows: list[dict], calibrator) -> list[float]:
    """The map's confidence of each of ``rows``."""
    return calibrator.predict([r["raw"] for r in rows], features=[r["grounding"] for r in rows])


def ece_of(rows: list[dict], calibrator) -> float:
    from factrl.eval.calibration import ece

    return ece(calibrated(rows, calibrator), [r["verdict"] == r["label"] for r in rows])


def rule_counts(rows: list[dict], params) -> dict[str, int]:
    """Per rule, how many of ``rows`` it turned to NOT ENOUGH INFO (a claim may fail several), and under
    ``without_verdict`` how many of those were runs in which the model wrote no verdict."""
    from factrl.agents.abstain import decide

    counts: Counter = Counter()
    for r in rows:
        decision = decide(r["verdict"], r["grounding"], r["confidence"], params)
        counts.update(decision.rules)
        counts["without_verdict"] += decision.abstained and r["verdict"] is None
    return dict(counts)


def run(args: argparse.Namespace, llm_loader=None) -> dict:
    """The benchmark (see the module docstring); ``llm_loader`` (spec -> LLM) replaces the real loader (tests)."""
    from factrl.agents.abstain import AbstainParams, DevRun, choose_rules, decide
    from factrl.config import load_section
    from factrl.data.out_of_corpus import out_of_corpus_claims
    from factrl.eval.abstention import abstention_metrics
    from factrl.eval.params import EvaluateParams
    from factrl.eval.systems import ModelSystem, load_llm
    from factrl.model_names import resolve_model
    from factrl.retrieval.index import Retriever

    workspace = Path(args.workspace).resolve()
    params_file = workspace / "params.yaml"
    evaluate = load_section(EvaluateParams, params_file) if params_file.is_file() else EvaluateParams()
    mode = args.mode or evaluate.retrieval_mode
    specs = [resolve_model(args.checkpoint, agent, where="--checkpoint", params_file=params_file
                           if params_file.is_file() else ROOT / "params.yaml") for agent in ("reason", "search")]
    specs = [str(workspace / s) if (workspace / s).is_dir() else s for s in specs]
    loader = llm_loader or (lambda spec: load_llm(spec, device="cpu", precision=args.precision))
    llms = {s: loader(s) for s in dict.fromkeys(specs)}
    system = ModelSystem(f"HARIS ({args.checkpoint})", "haris", llms[specs[0]], llms[specs[1]], top_k=evaluate.top_k,
                         max_new_tokens=args.max_new_tokens or evaluate.max_new_tokens,
                         max_turns=args.max_turns or evaluate.max_turns)
    retriever = Retriever(workspace / "index", mode=mode)
    passages = pq.read_table(workspace / "index" / "passages.parquet", columns=["title", "text"])
    real = [SHARED / f for f in REAL_FILES]
    half = args.out_of_corpus // 2

    # the dev mix: calibration and the choice of rules
    dev_in = sampled(workspace / "data/claims/dev.parquet", args.dev_per_hop, args.seed)
    dev_out = out_of_corpus_claims(passages, generated=half // 2 or 1, real_files=real, real=half // 2 or 1,
                                   seed=args.seed + 1)
    store = PhaseStore(workspace / ".bench-abstain" / phase_key(specs, args, mode))
    dev_rows_in = store.rows(phase_name("dev_in_corpus", args),
                             lambda: run_claims(system, dev_in, retriever, args.batch_size))
    dev_rows_out = store.rows(phase_name("dev_out_of_corpus", args),
                              lambda: run_claims(system, dev_out, retriever, args.batch_size))
    before = fit_map(dev_rows_in, BEFORE_METHOD)
    after = fit_map(dev_rows_in + dev_rows_out, args.method)
    dev_rows = dev_rows_in + dev_rows_out
    for r, c in zip(dev_rows, calibrated(dev_rows, after)):
        r["confidence"] = c
    rules, dev_score = choose_rules([DevRun(r["label"], r["verdict"], r["grounding"], r["confidence"])
                                     for r in dev_rows], AbstainParams(), min_coverage=args.min_coverage)

    # the test mix: the figures
    test_in = sampled(workspace / "data/claims/eval.parquet", args.per_hop, args.seed)
    test_out = out_of_corpus_claims(passages, generated=args.out_of_corpus - half, real_files=real, real=half,
                                    seed=args.seed + 2)
    rows = (store.rows(phase_name("test_in_corpus", args), lambda: run_claims(system, test_in, retriever, args.batch_size))
            + store.rows(phase_name("test_out_of_corpus", args),
                         lambda: run_claims(system, test_out, retriever, args.batch_size)))
    for r, c in zip(rows, calibrated(rows, after)):
        r["confidence"] = c
        r["outcome"] = decide(r["verdict"], r["grounding"], c, rules).verdict
    metrics = abstention_metrics(rows)
    outside = [r for r in rows if r["label"] == "NOT ENOUGH INFO"]
    return {
        "checkpoint": {"name": args.checkpoint, "reason": specs[0], "search": specs[1],
                       "trained": args.checkpoint not in ("base",)},
        "smoke": args.smoke,
        "workspace": str(workspace),
        "workspace_commit": git_state(workspace)["commit"],  # the code that trained the pair
        "in_corpus": {k: metrics["in_corpus"][k] for k in ("coverage", "accuracy_answered", "accuracy_all")}
        | {"n": metrics["in_corpus"]["n"], "per_hop": args.per_hop},
        "out_of_corpus": {"nei_rate": metrics["out_of_corpus"]["nei_rate"], "n": metrics["out_of_corpus"]["n"],
                          "sources": dict(Counter(test_out.column("source").to_pylist()))},
        "risk_coverage": metrics["risk_coverage"],
        "ece": {"before": ece_of(rows, before), "after": ece_of(rows, after),
                "method": {"before": BEFORE_METHOD, "after": args.method},
                "fitted_on": {"before": len(dev_rows_in), "after": len(dev_rows)}},
        "rules": {"chosen": rules.rules(), "dev_mix": dev_score | {"n": len(dev_rows)},
                  "decided_out_of_corpus": rule_counts(outside, rules),
                  "decided_in_corpus": rule_counts([r for r in rows if r["label"] != "NOT ENOUGH INFO"], rules)},
        "retrieval_mode": mode,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.abstain", description=__doc__.split("\n\n")[0])
    p.add_argument("--workspace", required=True, help="a dvc repro'd checkout: models/, index/, data/claims/")
    p.add_argument("--build-demo", action="store_true", help="write the demo world's claims and BM25 index into "
                                                             "the workspace first when it has no index")
    p.add_argument("--checkpoint", default="last", help="the pair: last (trained), warm, base, r<id> (default last)")
    p.add_argument("--per-hop", type=int, default=60, help="eval claims per hop in the test mix (default 60)")
    p.add_argument("--dev-per-hop", type=int, default=20, help="dev claims per hop in the dev mix (default 20)")
    p.add_argument("--out-of-corpus", type=int, default=150, help="out-of-corpus claims in the test mix, half "
                                                                  "generated, half real (default 150)")
    p.add_argument("--min-coverage", type=float, default=0.95, help="in-corpus coverage the rules must keep")
    p.add_argument("--method", default="grounded", help="calibration method of the map fitted on the dev mix "
                                                        "(default grounded: the raw score and the run's evidence)")
    p.add_argument("--mode", default=None, help="retrieval mode (default the workspace's evaluate.retrieval_mode)")
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--max-turns", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="label the result a smoke run (small n, not the issue's)")
    p.add_argument("--out", default=str(RESULTS))
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parser().parse_args(argv)
    measured = Measurement(args.precision)
    if args.build_demo:
        build_demo_workspace(Path(args.workspace))
    result = run(args)
    out = measured.write(result | {"commit": measured.git["commit"]}, args.out)
    print(os.linesep.join(f"{k}: {out[k]}" for k in ("in_corpus", "out_of_corpus", "ece", "rules")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
