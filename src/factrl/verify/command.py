"""``factrl verify "CLAIM"``: HARIS on one claim, its trace, and the outcome with the evidence behind it.

The run is :func:`factrl.agents.haris.verify`; what this command adds is the outcome the service and
``evaluate`` give: the verdict, or NOT ENOUGH INFO ("not enough evidence in this corpus") with the rules
the run failed and what it searched (``factrl.agents.abstain`` under the ``abstain`` section of
``--params``; its defaults when the file does not exist), and the sentences cited. The confidence rule
reads the raw confidence here: a checkpoint's calibration map is what ``factrl serve`` and ``evaluate``
apply. ``python -m factrl.agents.haris`` prints the bare trace.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from factrl.agents.abstain import AbstainParams, decide, load_abstain_params
from factrl.agents.evidence import RecordingRetriever, run_evidence
from factrl.agents.haris import TOP_K, default_reasoning_params, default_search_params, format_trace, verify


def outcome_lines(result, recorded, params: AbstainParams) -> str:
    """The outcome of ``result`` (a :class:`factrl.agents.haris.HarisResult`) from the hits ``recorded``
    during its run: the verdict or NOT ENOUGH INFO with its reasons and searches; then the citations."""
    confidence = result.raw_confidence if result.verdict is not None else None
    evidence = run_evidence(result, recorded)
    decision = decide(result.verdict, evidence.grounding(), confidence, params)
    lines = [f"OUTCOME: {decision.verdict or 'none (no valid verification)'}"]
    if decision.abstained:
        lines.append(f"not enough evidence in this corpus (the model wrote {decision.model_verdict or 'no verdict'}):")
        lines += [f"  - {r}" for r in decision.reasons]
        lines.append("searched: " + ("; ".join(evidence.searched) or "nothing"))
    for c in evidence.citations:
        lines.append(f"cited [{c.passage_id}] {c.title or ''}: {c.quote}")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    from factrl.llm.backends import add_endpoint_args

    p = argparse.ArgumentParser(prog="factrl verify", description="verify a claim with HARIS: the trace, then "
                                "the verdict or NOT ENOUGH INFO with the evidence behind it")
    p.add_argument("claim")
    p.add_argument("--index", default="index", help="index directory (default: index/)")
    p.add_argument("--mode", default="dense", choices=("bm25", "dense", "hybrid"))
    p.add_argument("--reason-model", default="smollm2-135m", help="model or LLM spec (openai:MODEL@URL)")
    p.add_argument("--search-model", default="smollm2-135m", help="model or LLM spec (openai:MODEL@URL)")
    p.add_argument("--k", type=int, default=TOP_K)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--show-raw", action="store_true", help="also print both agents' raw responses")
    p.add_argument("--params", default="params.yaml",
                   help="params file whose section abstain decides NOT ENOUGH INFO (its defaults when absent)")
    add_endpoint_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run HARIS on the claim and print its trace and outcome."""
    from factrl.llm.backends import load_llm, routed
    from factrl.retrieval.index import Retriever

    p = parser()
    args = p.parse_args(argv)
    if not (Path(args.index) / "manifest.json").exists():
        p.error(f"{args.index} holds no finished index; run `factrl index` or pass --index")
    params = load_abstain_params(args.params) if Path(args.params).is_file() else AbstainParams()
    retriever = RecordingRetriever(Retriever(args.index, mode=args.mode))
    specs = [routed(args, args.reason_model), routed(args, args.search_model)]
    llms = {spec: load_llm(spec) for spec in dict.fromkeys(specs)}
    common = {"temperature": args.temperature, "max_new_tokens": args.max_new_tokens}
    [result] = verify([args.claim], reason_llm=llms[specs[0]], search_llm=llms[specs[1]], retriever=retriever,
                      k=args.k, reason_params=default_reasoning_params(max_turns=args.max_turns, **common),
                      search_params=default_search_params(**common))
    print(format_trace(result))
    if args.show_raw:
        print("\n--- reasoning agent ---\n" + result.trajectory.response_text)
        for s in result.searches:
            if s is not None:
                print(f"\n--- search agent: {s.question} ---\n" + s.trajectory.response_text)
    print()
    print(outcome_lines(result, retriever.hits, params))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
