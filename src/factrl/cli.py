"""The `factrl` command: one sub-command per user-facing job, each delegating to a module.

    factrl prepare | index              run one pipeline stage outside DVC (reads params.yaml)
    factrl pipeline                     `dvc repro` as a Prefect flow
    factrl serve-retriever [...]        the retrieval HTTP server   (factrl.retrieval.server)
    factrl serve-llm [...]              the OpenAI-compatible server (factrl.llm.serve)
    factrl verify "CLAIM" [...]         HARIS on one claim, trace printed (factrl.agents.haris)
    factrl traces ROLLOUTS.parquet -o traces.html   a static page to browse rollouts (factrl.eval.traces)
    factrl evaluate --claims C.jsonl --passages P.jsonl --out DIR   Table 1 on any claim file (factrl.eval.runner)
    factrl profile tiny|long|paper      merge profiles/<name>.yaml into params.yaml (factrl.profiles)
    factrl train-summary [DIR] [--block N]  how reward / format / accuracy moved in metrics/train (factrl.rl.curves)
    factrl train --stage train_reason@1 [--backend verl] [--dry-run]   one training stage (factrl.recipes.train_cli)
    factrl serve-agent CHECKPOINT [...]  a trained agent behind `vllm serve` (factrl.llm.vllm)

Sub-commands import their module lazily, so `factrl --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module whose main(argv) runs it, one-line help)
COMMANDS = {
    "prepare": ("stages.prepare", "run the prepare stage with params.yaml"),
    "index": ("stages.index", "run the index stage with params.yaml"),
    "pipeline": ("flows.pipeline", "run `dvc repro` as a Prefect flow"),
    "serve-retriever": ("factrl.retrieval.server", "serve an index over HTTP (POST /retrieve)"),
    "serve-llm": ("factrl.llm.serve", "serve a local model as an OpenAI-compatible API"),
    "traces": ("factrl.eval.traces", "write a static HTML page to browse rollouts (TRAJECTORIES parquet)"),
    "evaluate": ("factrl.eval.runner", "evaluate systems on any claim file: --claims --passages --out"),
    "verify": ("factrl.agents.haris", 'verify one claim with HARIS and print the trace: verify "CLAIM"'),
    "profile": ("factrl.profiles", "apply a params profile from profiles/ (tiny, long, paper) to params.yaml"),
    "train-summary": ("factrl.rl.curves", "first vs second half (or --block N: per-block means) of each training curve in metrics/train"),
    "train": ("factrl.recipes.train_cli", "run (or --dry-run: print) one training stage on the local or verl backend"),
    "serve-agent": ("factrl.llm.vllm", "serve a checkpoint with `vllm serve` (prints the command; GPU machines)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="factrl", description="multi-agent fact-checking pipeline")
    parser.add_argument("command", choices=sorted(COMMANDS), help="; ".join(f"{k}: {v[1]}" for k, v in COMMANDS.items()))
    if not argv or argv[0] in {"-h", "--help"}:
        parser.print_help()
        return 0
    args, _rest = parser.parse_known_args(argv[:1])
    if "." not in sys.path:
        # stages/ and flows/ live at the repository root (thin entry points, not library code):
        # the command is run from there, as `dvc repro` is.
        sys.path.insert(0, ".")
    module = importlib.import_module(COMMANDS[args.command][0])
    if args.command in {"traces", "serve-retriever", "serve-llm", "evaluate", "verify", "profile", "train-summary",
                        "train", "serve-agent"}:
        return module.main(argv[1:]) or 0
    module.main(*argv[1:2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
