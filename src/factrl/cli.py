"""The `factrl` command: one sub-command per user-facing job, each delegating to a module.

The commands are listed once, in :data:`COMMANDS` (`factrl --help` prints them): a command is one
line there, naming the module whose ``main`` runs it. Sub-commands import their module lazily, so
`factrl --help` stays fast.

Every command runs library code, except ``prepare`` and ``index``, whose whole job is to run one of a
checkout's stages: they load ``stages/<name>.py`` from the current directory by path
(:func:`factrl.checkout.entry_module`) and, outside a checkout, stop with an error naming the
directory.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass

from factrl.checkout import NotACheckoutError, entry_module


@dataclass(frozen=True)
class Command:
    """module: whose ``main`` runs the command. help: one line for `factrl --help`. stage: ``main``
    is a pipeline entry point taking at most a params file (``factrl prepare [params.yaml]``);
    otherwise ``main(argv)`` parses its own arguments. checkout: ``module`` is a checkout's stage
    (``stages.prepare``), loaded from the current directory (:func:`factrl.checkout.entry_module`)."""

    module: str
    help: str
    stage: bool = False
    checkout: bool = False


COMMANDS: dict[str, Command] = {
    "prepare": Command("stages.prepare", "run the checkout's prepare stage with params.yaml", stage=True, checkout=True),
    "index": Command("stages.index", "run the checkout's index stage with params.yaml", stage=True, checkout=True),
    "pipeline": Command("factrl.orchestration.pipeline", "run the checkout's `dvc repro` as a Prefect flow", stage=True),
    "serve-retriever": Command("factrl.retrieval.server", "serve an index over HTTP (POST /retrieve)"),
    "serve-llm": Command("factrl.llm.serve", "serve a local model as an OpenAI-compatible API"),
    "traces": Command("factrl.eval.traces", "a static HTML page to browse rollouts: ROLLOUTS.parquet -o traces.html"),
    "evaluate": Command("factrl.eval.cli", "evaluate systems on any claim file: --claims --passages --out"),
    "verify": Command("factrl.verify.command", 'verify one claim with HARIS: the trace, then the verdict or NOT ENOUGH INFO: verify "CLAIM"'),
    "profile": Command("factrl.profiles", "merge profiles/<name>.yaml (tiny, long, hard, paper) into params.yaml"),
    "eval-table": Command("factrl.eval.report", "print the per-hop accuracy table of metrics/eval.json (--dataset demo)"),
    "train-summary": Command("factrl.rl.curves", "how each curve in metrics/train moved (--block N: block means)"),
    "train": Command("factrl.recipes.train_cli", "run (or --dry-run: print) one training stage on the local or verl backend"),
    "serve": Command("factrl.service.app", "the verifier as a web service and page: claims, texts, citations, corrections"),
    "serve-agent": Command("factrl.llm.vllm", "serve a checkpoint with `vllm serve` (prints the command; GPU machines)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="factrl", description="multi-agent fact-checking pipeline",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(f"  {name:<17}{c.help}" for name, c in COMMANDS.items()))
    parser.add_argument("command", choices=sorted(COMMANDS), help="one of the commands below (COMMAND --help: options)")
    if not argv or argv[0] in {"-h", "--help"}:
        parser.print_help()
        return 0
    args, _rest = parser.parse_known_args(argv[:1])
    command = COMMANDS[args.command]
    try:
        if command.checkout:
            module = entry_module(command.module, f"factrl {args.command}")
        else:
            module = importlib.import_module(command.module)
        if command.stage:
            module.main(*argv[1:2])
            return 0
        return module.main(argv[1:]) or 0
    except NotACheckoutError as exc:
        parser.exit(2, f"factrl: error: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
