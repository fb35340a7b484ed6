"""Stage `synthesize@r`: pseudo-labelled questions for round r's search-agent training (HARIS A.4).

    python -m stages.synthesize <round id> [params.yaml]    # one round (DVC: synthesize@<id>)

Round r reads its claims (segments/<segment>.parquet), runs the reasoning agent H_{prev} (with the
search agent L_{prev} answering its questions over index/) to collect the questions it asks, keeps
one question per claim, pairs it with the gold evidence, and has the teacher answer it (the recipe:
:func:`factrl.recipes.haris.synthesize.synthesize_round`). Outputs: qa/qa_r<id>.parquet (QA_PAIRS,
answered pairs), qa/rejected_r<id>.parquet (None answers, teacher failures, claims without a
question, with the reason) and qa/summary_r<id>.json (rates, tokens, cost, calls).
"""

from __future__ import annotations

import sys
from pathlib import Path

from factrl.config import load_section
from factrl.data import synthesis
from factrl.data.schemas import QA_PAIRS
from factrl.io import write_json, write_parquet
from factrl.llm.models import cache_dir
from factrl.model_names import RoundsParams, checkpoint_of
from factrl.recipes.haris.params import SynthesizeParams
from factrl.recipes.haris.rounds import find_round, round_claims
from factrl.recipes.haris.synthesize import evidence_passages, haris_rollout_fn, synthesize_round
from factrl.recipes.teacher import open_teacher


def main(round_id: str, params_file: str = "params.yaml", out: Path = Path("qa")) -> dict:
    params: SynthesizeParams = load_section(SynthesizeParams, params_file)
    rnd = find_round(load_section(RoundsParams, params_file).rounds, int(round_id))
    claims = round_claims(rnd, params.max_claims)
    reasoner, searcher = str(checkpoint_of("reason", rnd.prev)), str(checkpoint_of("search", rnd.prev))
    rollout_fn = haris_rollout_fn(reasoner, searcher, Path("index"), params, rnd.questions)
    work_dir = cache_dir() / "synthesize" / f"r{rnd.id}"
    with open_teacher(params.teacher, concurrency=params.batch_size * params.concurrency) as teacher:
        qa, rejected, summary = synthesize_round(
            claims, rnd, params, rollout_fn=rollout_fn, teacher=teacher, agent_checkpoint=reasoner,
            passages=evidence_passages(Path("data/passages.parquet"), claims), work_dir=work_dir,
            cache_path=cache_dir() / "llm_cache.sqlite")
    write_parquet(qa, out / f"qa_r{rnd.id}.parquet", QA_PAIRS)
    write_parquet(rejected, out / f"rejected_r{rnd.id}.parquet", synthesis.REJECTED)
    write_json(summary, out / f"summary_r{rnd.id}.json")
    print(f"synthesize@{rnd.id}: {summary['kept']} pairs kept of {summary['claims']} claims; "
          f"none_rate={summary['none_rate']:.3f}, teacher errors={summary['teacher_errors']}, "
          f"teacher calls={summary['usage']['teacher_calls']}")
    return summary


if __name__ == "__main__":
    main(*sys.argv[1:3])
