"""Stage `debate`: SC-MAKS's generation phase and debate rounds over the demo world's claims.

Inputs: data/claims/<split>.parquet for each of params `debate.splits` (at most `debate.max_claims` per
split, balanced by label and hops), index/, the pool's models (symbolic names such as `last` resolved
against params `model` and `rounds`). Outputs: debate/transcripts.parquet (DEBATE_TURNS: every answer of
every phase, the summaries) and debate/summary.json (DVC metrics: format failures, calls and seconds per
phase and member, accuracy and agreement before and after the debate, wall time, peak memory). Batches
are Prefect tasks (factrl.orchestration.debate); every call goes through the on-disk LLM cache and every phase is
checkpointed, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

from factrl.config import load_section
from factrl.data.schemas import CLAIMS, DEBATE_TURNS, validate
from factrl.data.splits import balanced_subset
from factrl.io import write_json, write_parquet
from factrl.llm.models import cache_dir
from factrl.recipes import scmaks
from factrl.recipes.scmaks_params import DebateParams


def main(params_file: str = "params.yaml", claims_dir: Path = Path("data/claims"), out: Path = Path("debate")) -> dict:
    from factrl.retrieval.index import Retriever

    params = scmaks.resolve_pool(load_section(DebateParams, params_file), params_file)
    scmaks.debate_plan(params)  # a wrong name stops the stage before any model loads
    claims = {}
    for split in params.splits:
        path = claims_dir / f"{split}.parquet"
        claims[split] = balanced_subset(validate(pq.read_table(path), CLAIMS, str(path)), params.max_claims)
    table, summary = scmaks.debate(claims, params, retriever=Retriever("index", mode=params.retrieval_mode),
                                   work_dir=cache_dir() / "debate")
    write_parquet(table, out / "transcripts.parquet", DEBATE_TURNS)
    write_json(summary, out / "summary.json")
    ff = summary["format_failures"]
    print(f"debate: {sum(summary['claims'].values())} claims x {len(summary['members'])} members, roles "
          f"{'/'.join(summary['roles']) or 'none'}; format failures {ff['total']}/{ff['answers']}; "
          f"{summary['calls']['backend']} calls ({summary['calls']['cache_hits']} cached); "
          f"{summary['wall_seconds']:.0f} s, peak {summary['peak_rss_mib']:.0f} MiB")
    return summary


if __name__ == "__main__":
    main(*sys.argv[1:2])
