"""``factrl evaluate``: the evaluation of stage ``evaluate`` on any claim file.

``factrl evaluate --claims CLAIMS.jsonl --passages PASSAGES.jsonl --out DIR`` (:func:`main`) indexes
the given passages first (into ``OUT/index``), then runs every system (``factrl.eval.systems``) on a
per-hop sample with balanced labels (``factrl.eval.runner.evaluate``) and writes the metrics, the
report, its plots and the trace page (``factrl.eval.outputs``). The shared options default to the
stage's params (``factrl.eval.params.EvaluateParams``).
"""

from __future__ import annotations

import argparse
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from factrl.agents.systems_registry import system_names
from factrl.eval.outputs import write_outputs
from factrl.eval.params import EvaluateParams
from factrl.eval.runner import EvalSet, evaluate
from factrl.eval.systems import build_systems, load_llm
from factrl.llm.backends import add_endpoint_args, parse_spec, routed


def cli_parser() -> argparse.ArgumentParser:
    """``factrl evaluate``'s arguments."""
    parser = argparse.ArgumentParser(
        prog="factrl evaluate",
        description="Evaluate fact-checking systems on a claim file: the passages are indexed first "
                    "(into OUT/index), then every system runs on a per-hop sample with balanced labels. "
                    "Writes OUT/metrics.json, OUT/eval.md (HARIS Table 1 layout), OUT/plots/ and "
                    "OUT/traces.html.")
    parser.add_argument("--claims", required=True, help="claim file (JSONL in the shared-data format, or Parquet)")
    parser.add_argument("--passages", required=True, help="passages to search (JSONL {id, title, text} or Parquet)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--systems", nargs="+", default=list(system_names()), choices=system_names(),
                        help="systems to run")
    parser.add_argument("--checkpoint", nargs=2, action="append", metavar=("REASON", "SEARCH"),
                        help="a HARIS (reasoning, search) model pair: directories, embedded names or LLM specs "
                             "(openai:MODEL@URL); repeatable (default: --base-model for both)")
    parser.add_argument("--base-model", default="smollm2-135m", help="model of the baselines (default smollm2-135m)")
    # the shared options default to the stage's params (factrl.eval.params.EvaluateParams), so a claim file is
    # scored as `evaluate` scores the demo; a test compares them
    parser.add_argument("--per-hop", type=int, default=EvaluateParams.per_hop,
                        help=f"claims per hop, labels balanced (0 = all; default {EvaluateParams.per_hop})")
    parser.add_argument("--seed", type=int, default=EvaluateParams.seed)
    parser.add_argument("--embedder", default="none", choices=("none", "minilm", "e5-nano", "e5-hub"),
                        help="dense embedder for the index; 'none' (default) builds BM25 only, the fast choice; "
                             "with an embedder, searches are hybrid (BM25 + dense, RRF)")
    parser.add_argument("--top-k", type=int, default=EvaluateParams.top_k,
                        help=f"passages per search (default {EvaluateParams.top_k}, as HARIS)")
    parser.add_argument("--max-new-tokens", type=int, default=EvaluateParams.max_new_tokens,
                        help=f"tokens per agent turn (default {EvaluateParams.max_new_tokens})")
    parser.add_argument("--max-turns", type=int, default=EvaluateParams.max_turns,
                        help=f"questions / searches per rollout (default {EvaluateParams.max_turns}: a 4-hop claim "
                             "takes 4, and one spare)")
    parser.add_argument("--batch-size", type=int, default=EvaluateParams.batch_size,
                        help="claims per batched system call (see factrl.eval.params.EvaluateParams)")
    parser.add_argument("--device", default="auto", help="where the models run: auto (CUDA when visible, else CPU), "
                                                          "cpu, cuda or cuda:N")
    parser.add_argument("--n-boot", type=int, default=EvaluateParams.n_boot,
                        help=f"bootstrap resamples (default {EvaluateParams.n_boot})")
    parser.add_argument("--trace-claims", type=int, default=EvaluateParams.trace_claims,
                        help="claims per system on the trace page")
    parser.add_argument("--name", default=None, help="dataset name in the report (default: the claim file's stem)")
    add_endpoint_args(parser)
    return parser


def main(argv: list[str] | None = None, *, llm_loader: Callable[[str], Any] | None = None) -> int:
    """``factrl evaluate``: the evaluation on any claim file in the shared-data format."""
    args = cli_parser().parse_args(argv)

    from factrl.data.schemas import PASSAGES
    from factrl.data.sources import read_claims, read_passages
    from factrl.io import write_parquet
    from factrl.retrieval.index import Retriever, build_index

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(args.out)
    claims = read_claims(args.claims)
    passages_file = out / "passages.parquet"
    write_parquet(read_passages(args.passages), passages_file, PASSAGES)
    embedder = None if args.embedder == "none" else args.embedder
    build_index(passages_file, out / "index", embedder=embedder, bm25=True)
    retriever = Retriever(out / "index", mode="bm25" if embedder is None else "hybrid")
    def short(spec: str) -> str:
        return Path(parse_spec(spec).model).name

    checkpoints = [(f"HARIS ({short(r)})" if r == s else f"HARIS ({short(r)}+{short(s)})",
                    routed(args, r), routed(args, s))
                   for r, s in (args.checkpoint or [(args.base_model, args.base_model)])]
    from factrl.hardware import resolve_device

    device = resolve_device(args.device, key="--device")
    systems = build_systems(args.systems, checkpoints, routed(args, args.base_model),
                            load_llm=llm_loader or functools.partial(load_llm, device=device),
                            top_k=args.top_k, max_new_tokens=args.max_new_tokens, max_turns=args.max_turns)
    name = args.name or Path(args.claims).stem
    result = evaluate([EvalSet(name, claims, retriever)], systems, per_hop=args.per_hop, seed=args.seed,
                      batch_size=args.batch_size, n_boot=args.n_boot, trace_claims=args.trace_claims)
    notes = [f"claims: {args.claims} ({claims.num_rows} rows); passages: {args.passages}",
             f"sample: up to {args.per_hop} claims per hop, balanced labels, seed {args.seed}",
             f"retrieval: {'BM25' if embedder is None else 'hybrid BM25 + ' + embedder}, top-{args.top_k}; "
             f"{args.max_new_tokens} new tokens per turn, {args.max_turns} turns",
             f"baselines on {routed(args, args.base_model)}"]
    written = write_outputs(result, metrics_path=out / "metrics.json", report_path=out / "eval.md",
                            plots_dir=out / "plots", traces_path=out / "traces.html",
                            title=f"Evaluation: {name}", notes=notes)
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return 0
